"""The two op sets the engine can run the model with (see `models.qwen3` for the contract).

det: every op whose reduction could depend on the number of tokens in the call runs an
M-independent schedule: det-suite's FP8 linear, the batch-invariant BF16 GEMM for the
lm_head, RMSNorm, log_softmax and paged attention (`ops.batch_invariant`).

stock: the control arm, what an engine uses without batch invariance: static FP8
quantization then `torch._scaled_mm` (cuBLASLt) on CUDA, torch ops for the norms and the
lm_head, SDPA over the K/V gathered from the cache, `torch.log_softmax`. Same cache, same
scheduler: only the kernels differ.

m-dependent: the model-level positive control, det's op set with FP8 linears whose schedule
follows M (`engine.m_dependent`); a cache-hit check must flag it.

fast-stock: the best non-batch-invariant path this engine runs (`engine.fast_stock`):
`bench e2e`'s control, so that its ratio prices determinism.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from det_suite.kernels.fp8_constants import FP8_E4M3_MAX

MODES = ("det", "stock", "m-dependent", "fast-stock")


@dataclass(frozen=True)
class OpSet:
    name: str
    fp8_linear: Callable
    bf16_linear: Callable
    rms_norm: Callable
    write_kv: Callable
    attention: Callable
    log_softmax: Callable
    # Fused producers (see `models.qwen3` for the contract); None: the model composes them
    # from the ops above, which is what they must equal bit for bit.
    norm_for_linears: Callable | None = None
    gated_for_linear: Callable | None = None
    qk_norm_rope_write: Callable | None = None
    attention_for_linear: Callable | None = None
    # Stacked projections: all three or none (the model's contract).
    stack_projections: Callable | None = None
    norm_for_group: Callable | None = None
    group_linear: Callable | None = None

    def __post_init__(self) -> None:
        stacked = (self.stack_projections, self.norm_for_group, self.group_linear)
        if any(f is None for f in stacked) and any(f is not None for f in stacked):
            raise ValueError(f"op set {self.name!r}: stack_projections, norm_for_group and "
                             "group_linear go together (all set or all None)")


def det_opset(stages: int | None = None) -> OpSet:
    """det-suite's kernels. `stages`: every FP8 linear at this many pipeline stages instead
    of its tile's own (same tiles otherwise: the depth moves loads, never the arithmetic,
    which is what the 2- vs 3-stage checks prove)."""
    from det_suite.ops import batch_invariant as bi
    from det_suite.ops import quantized_inputs as qi
    from det_suite.engine.linear_groups import stack_layer_projections
    from det_suite.ops.linear import fp8_linear, fp8_scaled_mm_segmented

    def linear(x, lin):
        if isinstance(x, qi.QuantizedInput):
            return qi.linear_on_quantized(x, lin.weight, lin.weight_scale, lin.input_scale,
                                          lin.bias, num_stages=stages)
        return fp8_linear(x, lin.weight, lin.weight_scale, lin.input_scale, lin.bias,
                          num_stages=stages)

    # The producers of FP8 linears' inputs quantize in their own pass: a decode step
    # launches a norm and three quantizations per q/k/v as one kernel (the H200 profile,
    # benchmarks/profile_decode.py: 252 quantization launches, 0.93 ms of a 6.2 ms step).
    def norm_for_linears(x, weight, eps, linears):
        scales = [lin.input_scale for lin in linears]
        return [qi.QuantizedInput(q, s, x.dtype)
                for q, s in zip(qi.rms_norm_quantized(x, weight, eps, scales), scales)]

    def gated_for_linear(gate, up, lin):
        return qi.QuantizedInput(qi.silu_mul_quantized(gate, up, lin.input_scale),
                                 lin.input_scale, gate.dtype)

    # Attention's epilogue quantizes the o projection's input (one launch fewer per layer).
    def attention_for_linear(q, k_cache, v_cache, block_tables, context_lens, query_starts,
                             scale, lin):
        out = bi.paged_attention(q, k_cache, v_cache, block_tables, context_lens,
                                 query_starts, scale, out_scale=lin.input_scale)
        return qi.QuantizedInput(out, lin.input_scale, q.dtype)

    # q/k/v and gate/up as one GEMM each: k and v alone fill 16 of an H200's SMs at decode.
    def norm_for_group(x, delta, weight, eps, group):
        scales = [member.input_scale for member in group.members]
        if delta is None:
            return x, qi.rms_norm_quantized_stacked(x, weight, eps, scales)
        return qi.add_rms_norm_quantized_stacked(x, delta, weight, eps, scales)

    def group_linear(stacked, group, dtype):
        segments, k = stacked.shape[0], stacked.shape[-1]
        out = fp8_scaled_mm_segmented(stacked.reshape(segments, -1, k), group.weight,
                                      group.input_scales, group.weight_scales, group.widths,
                                      group.bias, out_dtype=dtype, num_stages=stages)
        return out.split(group.widths, dim=-1)

    return OpSet(name="det" if stages is None else f"det-s{stages}", fp8_linear=linear,
                 bf16_linear=bi.bf16_linear,
                 rms_norm=bi.rms_norm, write_kv=bi.write_kv, attention=bi.paged_attention,
                 log_softmax=bi.log_softmax, norm_for_linears=norm_for_linears,
                 gated_for_linear=gated_for_linear, qk_norm_rope_write=bi.qk_norm_rope_write,
                 attention_for_linear=attention_for_linear, stack_projections=stack_layer_projections, norm_for_group=norm_for_group,
                 group_linear=group_linear)


# -- stock -------------------------------------------------------------------------------

def quantize_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Static per-tensor FP8 quantization in torch: x / scale, saturated to e4m3."""
    return (x.float() / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def fp8_operand(x, input_scale: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """(FP8 activation, activation dtype): a fused producer's QuantizedInput as it is, any
    other x quantized with the static input scale."""
    from det_suite.ops.quantized_inputs import QuantizedInput

    if isinstance(x, QuantizedInput):
        return x.q, x.dtype
    return quantize_static(x, input_scale), x.dtype


def vendor_scaled_mm(q, weight_nk, scale_a, scale_b, bias, dtype) -> torch.Tensor:
    """q (M, K) FP8 @ weight (N, K)^T through cuBLASLt's scaled-MM, scale_b per tensor or
    per column; on the CPU, where torch has no FP8 GEMM, the fp32 product of the same
    quantized operands. The vendor path the stock, fast-stock and m-dependent arms share."""
    if q.is_cuda:
        if scale_b.numel() > 1:    # rowwise: both scales 2-D fp32
            scale_a = scale_a.reshape(1, 1).expand(q.shape[0], 1).contiguous()
            return torch._scaled_mm(q, weight_nk.t(), scale_a=scale_a,
                                    scale_b=scale_b.reshape(1, -1), bias=bias,
                                    out_dtype=dtype)
        return torch._scaled_mm(q, weight_nk.t(), scale_a=scale_a.reshape(()),
                                scale_b=scale_b.reshape(()), bias=bias, out_dtype=dtype)
    out = (q.float() @ weight_nk.float().t()) * (scale_a.reshape(()) * scale_b.reshape(1, -1))
    if bias is not None:
        out = out + bias.float()
    return out.to(dtype)


def stock_fp8_linear(x: torch.Tensor, lin) -> torch.Tensor:
    """Quantize with the static input scale, then cuBLASLt's scaled-MM."""
    lead, k = x.shape[:-1], x.shape[-1]
    q = quantize_static(x.reshape(-1, k), lin.input_scale)
    out = vendor_scaled_mm(q, lin.weight, lin.input_scale, lin.weight_scale, lin.bias, x.dtype)
    return out.reshape(*lead, out.shape[-1])


def stock_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Qwen3RMSNorm, op for op."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def stock_write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v.to(v_cache.dtype))


def _gather(cache: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """(R, W * page_size, Hkv, D): each request's pages, in order."""
    pages = cache[block_tables.long()]
    return pages.reshape(pages.shape[0], -1, *cache.shape[2:])


# SDPA backends the control may use: cuDNN's is left out because inside CUDA Graph capture
# with padded batches it failed on the H200 (torch 2.11: "mha_graph.execute(...).is_good()"
# false); the memory-efficient kernel is what an engine's masked SDPA gets without it.
STOCK_SDPA_BACKENDS = (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION,
                       SDPBackend.MATH)


def _sdpa(q, k, v, mask, scale):
    """q (B, Hq, L, D), k/v (B, Hkv, S, D), boolean mask broadcastable to (B, Hq, L, S)."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    with sdpa_kernel(list(STOCK_SDPA_BACKENDS)):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def stock_attention(q, k_cache, v_cache, block_tables, context_lens, query_starts, scale):
    """SDPA over the K/V gathered from the cache. One query per request (decode) runs as one
    batched call with static shapes (CUDA Graph capturable); prefill runs request by request
    with the causal mask offset by the request's cached length."""
    t, requests = q.shape[0], block_tables.shape[0]
    k_all, v_all = _gather(k_cache, block_tables), _gather(v_cache, block_tables)
    if t == requests:
        keys = torch.arange(k_all.shape[1], device=q.device)
        mask = (keys[None, :] <= context_lens.long()[:, None])[:, None, None, :]
        out = _sdpa(q[:, :, None, :], k_all.transpose(1, 2),
                    v_all.transpose(1, 2), mask, scale)
        return out.reshape(t, q.shape[1], q.shape[2])
    out = torch.empty_like(q)
    starts, contexts = query_starts.tolist(), context_lens.tolist()
    for r in range(requests):
        lo, hi, ctx = starts[r], starts[r + 1], contexts[r]
        if hi == lo:
            continue
        length = ctx + hi - lo
        qr = q[lo:hi].transpose(0, 1)[None]                       # (1, Hq, L, D)
        kr = k_all[r, :length].transpose(0, 1)[None]              # (1, Hkv, S, D)
        vr = v_all[r, :length].transpose(0, 1)[None]
        rows = torch.arange(hi - lo, device=q.device)[:, None] + ctx
        mask = torch.arange(length, device=q.device)[None, :] <= rows
        out[lo:hi] = _sdpa(qr, kr, vr, mask, scale)[0].transpose(0, 1)
    return out


def stock_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1)


def stock_opset() -> OpSet:
    return OpSet(name="stock", fp8_linear=stock_fp8_linear, bf16_linear=F.linear,
                 rms_norm=stock_rms_norm, write_kv=stock_write_kv, attention=stock_attention,
                 log_softmax=stock_log_softmax)


def opset_for(mode: str) -> OpSet:
    if mode == "det":
        return det_opset()
    if mode == "stock":
        return stock_opset()
    if mode == "m-dependent":
        from det_suite.engine.m_dependent import m_dependent_opset
        return m_dependent_opset()
    if mode == "fast-stock":
        from det_suite.engine.fast_stock import fast_stock_opset
        return fast_stock_opset()
    raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
