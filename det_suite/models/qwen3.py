"""Qwen3 dense decoder over packed ragged tokens and a paged KV cache.

One forward serves prefill, chunked prefill and decode alike: the tokens of every request in
the call are packed into one (T, H) tensor (no padding), each request's earlier tokens are
read from the paged KV cache, and only the rows whose next-token logprobs are wanted go
through the final norm, the lm_head and log_softmax.

Which kernels run is one object passed in, the op set (`engine.opsets`): the
batch-invariant ops (det mode) or torch/vendor ops (the stock control). It provides
    fp8_linear(x, linear: Fp8Linear) -> x.dtype      static per-tensor FP8 linear
    bf16_linear(x, weight) -> x.dtype                the lm_head
    rms_norm(x, weight, eps) -> x.dtype              per row of the last dimension
    write_kv(k, v, k_cache, v_cache, slot_mapping)   store the new tokens' K/V
    attention(q, k_cache, v_cache, block_tables, context_lens, query_starts, scale)
    log_softmax(logits) -> fp32
and, optionally (None: composed here from the ops above, which they must equal bit for bit),
    norm_for_linears(x, weight, eps, linears) -> one input per linear: rms_norm(x) as each
        linear's fp8_linear accepts it (e.g. already quantized with its input scale)
    gated_for_linear(gate, up, linear) -> silu(gate) * up as the linear accepts it
    qk_norm_rope_write(q, k, v, q_weight, k_weight, eps, cos, sin, k_cache, v_cache,
        slot_mapping) -> q: rms_norm of q and k, apply_rope on both, write_kv
    attention_for_linear(q, k_cache, v_cache, block_tables, context_lens, query_starts,
        scale, linear) -> attention's (T, Hq * D) output as the linear accepts it
and, together (None: every linear is its own fp8_linear),
    stack_projections(layer) -> (q/k/v group or None, gate/up group or None): the layer's
        projections that read one input, stacked for one GEMM (`engine.linear_groups`)
    norm_for_group(x, delta, weight, eps, group) -> (x + delta, the group's input):
        the residual add (delta None: none) and rms_norm as the group's GEMM reads it
    group_linear(inputs, group, dtype) -> one output per member, the members' fp8_linear
        bits under the stacked shape's reduction schedule
Everything else here is elementwise or a gather, so it cannot depend on the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PackedBatch:
    """One forward call's inputs, built by the engine's scheduler (all on the model's device).

    Request r owns rows query_starts[r]:query_starts[r+1]; context_lens[r] of its tokens are
    already in the cache; the new tokens' K/V go to slot_mapping (page * page_size + offset).
    logit_rows: the rows whose next-token distribution is returned, in that order.
    """

    token_ids: torch.Tensor      # (T,) int64
    positions: torch.Tensor      # (T,) int64
    slot_mapping: torch.Tensor   # (T,) int64
    block_tables: torch.Tensor   # (R, W) int32
    context_lens: torch.Tensor   # (R,) int32
    query_starts: torch.Tensor   # (R+1,) int32
    logit_rows: torch.Tensor     # (L,) int64


def rope_parameters(config) -> tuple[float, float]:
    """(theta, attention scaling) of Qwen3's default RoPE; other RoPE types are refused."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    kind = params.get("rope_type", "default")
    if kind != "default" or theta is None:
        raise ValueError(f"config.rope_parameters: only the default RoPE with a rope_theta is "
                         f"supported, got {params or None}")
    return float(theta), 1.0


def rope_table(config, max_positions: int, device, dtype=torch.bfloat16):
    """cos and sin for positions 0..max_positions-1, (P, head_dim) in `dtype`.

    Computed once, in fp32, the way transformers' Qwen3 rotary embedding does (inv_freq from
    int64 exponents, position times inv_freq, cat(freqs, freqs), cos/sin, then cast), and
    indexed by position: a token's rotation never depends on what else is in the batch."""
    theta, scaling = rope_parameters(config)
    dim = config.head_dim
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device)
                                .float() / dim))
    positions = torch.arange(max_positions, dtype=torch.int64, device=device).float()
    freqs = positions[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (T, heads, D) rotated by per-row cos/sin (T, D), transformers' formula and order."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    return (x * cos) + (_rotate_half(x) * sin)


class Qwen3Model:
    """A Qwen3Checkpoint bound to an op set; `forward` runs one packed batch."""

    def __init__(self, checkpoint, ops, *, max_positions: int) -> None:
        config = checkpoint.config
        self.ckpt, self.ops = checkpoint, ops
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim, self.eps = config.head_dim, float(config.rms_norm_eps)
        self.scale = self.head_dim ** -0.5
        self.vocab = config.vocab_size
        self.cos, self.sin = rope_table(config, max_positions, checkpoint.device,
                                        checkpoint.embed_tokens.dtype)
        # Per layer: (q/k/v group, gate/up group), None where the linears run one by one.
        stack = ops.stack_projections
        self.groups = [stack(layer) if stack is not None else (None, None)
                       for layer in checkpoint.layers]

    def _norm_inputs(self, x, delta, weight, linears, group):
        """(x + delta, the inputs of `linears`): one stacked input for a group, else one
        per linear. delta None: x as it is."""
        ops = self.ops
        if group is not None:
            return ops.norm_for_group(x, delta, weight, self.eps, group)
        if delta is not None:
            x = x + delta
        if ops.norm_for_linears is not None:
            return x, ops.norm_for_linears(x, weight, self.eps, linears)
        return x, [ops.rms_norm(x, weight, self.eps)] * len(linears)

    def _project(self, inputs, linears, group, dtype) -> list:
        if group is not None:
            return self.ops.group_linear(inputs, group, dtype)
        return [self.ops.fp8_linear(h, lin) for h, lin in zip(inputs, linears)]

    def _attention_block(self, layer, inputs, group, batch: PackedBatch, kv, cos, sin,
                         dtype) -> torch.Tensor:
        ops, t = self.ops, batch.token_ids.shape[0]
        q, k, v = self._project(inputs, (layer.q_proj, layer.k_proj, layer.v_proj), group,
                                dtype)
        q = q.view(t, self.heads, self.head_dim)
        k = k.view(t, self.kv_heads, self.head_dim)
        v = v.view(t, self.kv_heads, self.head_dim)
        k_cache, v_cache = kv
        if ops.qk_norm_rope_write is not None:
            q = ops.qk_norm_rope_write(q, k, v, layer.q_norm, layer.k_norm, self.eps, cos, sin,
                                       k_cache, v_cache, batch.slot_mapping)
        else:
            q = ops.rms_norm(q, layer.q_norm, self.eps)
            k = ops.rms_norm(k, layer.k_norm, self.eps)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            ops.write_kv(k, v, k_cache, v_cache, batch.slot_mapping)
        attention = (batch.block_tables, batch.context_lens, batch.query_starts, self.scale)
        if ops.attention_for_linear is not None:
            out = ops.attention_for_linear(q, k_cache, v_cache, *attention, layer.o_proj)
        else:
            out = ops.attention(q, k_cache, v_cache, *attention)
            out = out.reshape(t, self.heads * self.head_dim)
        return ops.fp8_linear(out, layer.o_proj)

    def _mlp_block(self, layer, inputs, group, dtype) -> torch.Tensor:
        ops = self.ops
        gate, up = self._project(inputs, (layer.gate_proj, layer.up_proj), group, dtype)
        if ops.gated_for_linear is not None:
            return ops.fp8_linear(ops.gated_for_linear(gate, up, layer.down_proj),
                                  layer.down_proj)
        return ops.fp8_linear(F.silu(gate) * up, layer.down_proj)

    def forward(self, batch: PackedBatch, kv_caches) -> torch.Tensor:
        """Log-probabilities (L, V) fp32 of the next token at batch.logit_rows."""
        x = self.ckpt.embed_tokens[batch.token_ids]
        cos, sin = self.cos[batch.positions], self.sin[batch.positions]
        # Each block's output is added to the residual stream by the next norm, which can
        # do it in the same launch (norm_for_group); the last one is added here.
        delta = None
        for layer, (qkv, gate_up), kv in zip(self.ckpt.layers, self.groups, kv_caches):
            x, inputs = self._norm_inputs(x, delta, layer.input_layernorm,
                                          (layer.q_proj, layer.k_proj, layer.v_proj), qkv)
            delta = self._attention_block(layer, inputs, qkv, batch, kv, cos, sin, x.dtype)
            x, inputs = self._norm_inputs(x, delta, layer.post_attention_layernorm,
                                          (layer.gate_proj, layer.up_proj), gate_up)
            delta = self._mlp_block(layer, inputs, gate_up, x.dtype)
        if delta is not None:
            x = x + delta
        if batch.logit_rows.shape[0] == 0:     # a prefill chunk before any scored position
            return torch.empty((0, self.vocab), dtype=torch.float32, device=x.device)
        h = self.ops.rms_norm(x[batch.logit_rows], self.ckpt.norm, self.eps)
        return self.ops.log_softmax(self.ops.bf16_linear(h, self.ckpt.lm_head))
