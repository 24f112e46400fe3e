"""The fast stock arm: the best path this engine runs without batch invariance, so that
`bench e2e`'s det / stock ratio prices determinism, not a slow control.

Same engine, same CUDA graphs, same fusion structure as det; only the ops whose reduction
a vendor or a flash-decoding kernel would choose by M or by context differ:

- FP8 linears: `torch._scaled_mm` (cuBLASLt per-tensor; q/k/v and gate/up stacked into one
  GEMM each with per-column weight scales, the rowwise-scaled `_scaled_mm`), fed by det's
  fused norm + quantize and silu-mul + quantize producers (row-local, so invariant by
  nature: an engine's fused quantization computes the same thing). At decode-sized M
  (<= DECODE_MAX_ROWS rows) det-suite's GEMM instead, the faster kernel there: the kernel
  choice follows M, as an engine's does.
- Decode attention: split-KV (flash-decoding), `kernels.stock_decode_attention_split` and
  `_combine`, splits chosen by the batch (`decode_splits`) and slice length by the context;
  the combine quantizes the o projection's input as det's does.
- Prefill attention, norms, q/k norm + RoPE + KV write: det's kernels (the fastest paged
  prefill attention and row-local kernels this engine has; row-local ops have nothing to
  gain from M).
- lm_head: `F.linear` (cuBLAS BF16); log_softmax: `torch.log_softmax` in fp32.

On the CPU (no FP8 GEMM in torch) the vendor linears compute the fp32 product of the same FP8
operands, as the stock arm does.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import torch.nn.functional as F

from det_suite.engine.opsets import fp8_operand, vendor_scaled_mm
from det_suite.kernels.fp8_constants import FP8_E4M3_MAX
from det_suite.ops.launch import sm_count

MODE = "fast-stock"
# Decode attention tiles: 64 keys per tile (a BF16 MMA's K), the GQA group's heads padded to
# 16 rows (tl.dot's smallest M).
BLOCK_KV = 64
MIN_BLOCK_H = 16
# Programs the split kernel aims for, per SM: two waves keep every SM busy while the
# combine's work (one read of every split) stays small.
PROGRAMS_PER_SM = 2
MAX_SPLITS = 64
CPU_SMS = 4
# At decode-sized M, det-suite's decode tiles read the FP8 weights nearer the bandwidth floor
# than cuBLASLt (one H100, run h100-2026-12-07-round3: 0.92x torch._scaled_mm's time at M = 1
# on Qwen3-8B's shapes, parity by M = 32); an engine takes the fastest kernel per M, so the
# control's linears do too. Above this many rows, cuBLASLt.
DECODE_MAX_ROWS = 16


def decode_splits(requests: int, kv_heads: int, max_keys: int, sms: int) -> int:
    """How many slices each (request, KV head) splits its keys into: enough programs for
    PROGRAMS_PER_SM waves over the SMs, a power of two (one compiled kernel per count), at
    most one slice per BLOCK_KV keys the block table can hold. A function of the batch:
    the schedule flash-decoding picks, and the reason it is not batch-invariant."""
    wanted = -(-(PROGRAMS_PER_SM * sms) // max(1, requests * kv_heads))
    most = max(1, min(MAX_SPLITS, -(-max_keys // BLOCK_KV)))
    splits = 1
    while splits * 2 <= min(wanted, most):
        splits *= 2
    return splits


def decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale: float, *,
                     out_scale: torch.Tensor | None = None) -> torch.Tensor:
    """One query per request (q (R, Hq, D)) over the paged cache, split-KV. Returns (R, Hq,
    D) in q's dtype, or with out_scale the o projection's FP8 input (R, Hq * D)."""
    # det_suite.ops throws the interpreter switch (GPU-faithful numerics on the CPU) before
    # any kernel module imports Triton.
    import det_suite.ops  # noqa: F401
    from triton import next_power_of_2

    from det_suite.kernels.stock_decode_attention_combine import (
        stock_decode_attention_combine_kernel as combine)
    from det_suite.kernels.stock_decode_attention_split import (
        stock_decode_attention_split_kernel as split_kernel)

    requests, q_heads, head_dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    group = q_heads // kv_heads
    sms = sm_count(q.device.index or 0) if q.is_cuda else CPU_SMS
    splits = decode_splits(requests, kv_heads, block_tables.shape[1] * page_size, sms)
    stats = torch.empty((requests, q_heads, splits, 2), dtype=torch.float32, device=q.device)
    acc = torch.empty((requests, q_heads, splits, head_dim), dtype=torch.float32,
                      device=q.device)
    quantize = out_scale is not None
    out = torch.empty(q.shape, dtype=torch.float8_e4m3fn if quantize else q.dtype,
                      device=q.device)
    if requests == 0:
        return out.reshape(requests, -1) if quantize else out
    split_kernel[(requests, kv_heads, splits)](
        q, k_cache, v_cache, block_tables, context_lens, stats, acc, float(scale), page_size,
        q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3],
        block_tables.stride(0), *stats.stride()[:3], *acc.stride()[:3],
        GROUP=group, BLOCK_H=max(MIN_BLOCK_H, next_power_of_2(group)), HEAD_DIM=head_dim,
        BLOCK_KV=BLOCK_KV, NUM_SPLITS=splits, num_warps=4, num_stages=2)
    combine[(requests, q_heads)](
        stats, acc, context_lens, q, out, out_scale if quantize else stats,
        *stats.stride()[:3], *acc.stride()[:3], out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_KV=BLOCK_KV, NUM_SPLITS=splits,
        SPLITS_P2=next_power_of_2(splits), QUANTIZE_OUT=quantize, FP8_MAX=FP8_E4M3_MAX,
        num_warps=4, num_stages=1)
    return out.reshape(requests, -1) if quantize else out


# -- FP8 linears -----------------------------------------------------------------------------

def fast_fp8_linear(x, lin) -> torch.Tensor:
    q, dtype = fp8_operand(x, lin.input_scale)
    lead = q.shape[:-1]
    if _decode_sized(q):
        from det_suite.ops.quantized_inputs import QuantizedInput, linear_on_quantized

        return linear_on_quantized(QuantizedInput(q, lin.input_scale, dtype), lin.weight,
                                   lin.weight_scale, lin.input_scale, lin.bias)
    out = vendor_scaled_mm(q.reshape(-1, q.shape[-1]), lin.weight, lin.input_scale,
                           lin.weight_scale, lin.bias, dtype)
    return out.reshape(*lead, out.shape[-1])


def _decode_sized(q: torch.Tensor) -> bool:
    return q.numel() // q.shape[-1] <= DECODE_MAX_ROWS


@functools.cache
def _det_ops():
    from det_suite.engine.opsets import det_opset

    return det_opset()


# Per stacked group (by id, the group kept alive beside it): its weight scales per column,
# made once when the layer is stacked (a host read of the scales; never inside a graph).
_COLUMN_SCALES: dict[int, tuple] = {}


def _column_scales(group) -> torch.Tensor:
    return _COLUMN_SCALES[id(group)][1]


def _shares_input_scale(group) -> bool:
    return bool(torch.all(group.input_scales == group.input_scales[0]))


def stack_projections(layer):
    """det's stacking where every member reads one input scale (one quantized input for the
    stacked GEMM, as engines require of fused q/k/v); otherwise the linears stay separate."""
    from det_suite.engine.linear_groups import stack_layer_projections

    groups = []
    for group in stack_layer_projections(layer):
        if group is None or not _shares_input_scale(group):
            groups.append(None)
            continue
        if id(group) not in _COLUMN_SCALES:
            widths = torch.tensor(group.widths, device=group.weight.device)
            columns = torch.repeat_interleave(group.weight_scales, widths)
            _COLUMN_SCALES[id(group)] = (group, columns.contiguous())
        groups.append(group)
    return tuple(groups)


def norm_for_group(x, delta, weight, eps, group):
    from det_suite.ops import quantized_inputs as qi

    # The first member's own parameter, not a slice of the stacked scales: a scale is
    # validated once per tensor (before graph capture), and a fresh slice never would be.
    scale = [group.members[0].input_scale]
    if delta is None:
        return x, qi.rms_norm_quantized_stacked(x, weight, eps, scale)[0]
    x, stacked = qi.add_rms_norm_quantized_stacked(x, delta, weight, eps, scale)
    return x, stacked[0]


def group_linear(q, group, dtype):
    if _decode_sized(q):
        # det's stacked GEMM reads one activation per member: every member shares q here.
        stacked = q.reshape(1, -1, q.shape[-1]).expand(len(group.widths), -1, -1).contiguous()
        return _det_ops().group_linear(stacked, group, dtype)
    columns = _column_scales(group)
    out = vendor_scaled_mm(q.reshape(-1, q.shape[-1]), group.weight, group.input_scales[:1],
                           columns, group.bias, dtype)
    return out.reshape(*q.shape[:-1], -1).split(group.widths, dim=-1)


# -- attention -------------------------------------------------------------------------------

def _attention(q, k_cache, v_cache, block_tables, context_lens, query_starts, scale,
               out_scale=None):
    from det_suite.ops import batch_invariant as bi

    if q.shape[0] == block_tables.shape[0]:      # one query per request: decode
        return decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale,
                                out_scale=out_scale)
    return bi.paged_attention(q, k_cache, v_cache, block_tables, context_lens, query_starts,
                              scale, out_scale=out_scale)


def fast_attention(q, k_cache, v_cache, block_tables, context_lens, query_starts, scale):
    return _attention(q, k_cache, v_cache, block_tables, context_lens, query_starts, scale)


def attention_for_linear(q, k_cache, v_cache, block_tables, context_lens, query_starts,
                         scale, lin):
    from det_suite.ops.quantized_inputs import QuantizedInput

    out = _attention(q, k_cache, v_cache, block_tables, context_lens, query_starts, scale,
                     out_scale=lin.input_scale)
    return QuantizedInput(out, lin.input_scale, q.dtype)


def fast_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1)


def fast_stock_opset():
    """det's op set with the M- and context-dependent ops swapped for the fast ones above."""
    return dataclasses.replace(
        _det_ops(), name=MODE, fp8_linear=fast_fp8_linear, bf16_linear=F.linear,
        attention=fast_attention, attention_for_linear=attention_for_linear,
        log_softmax=fast_log_softmax, stack_projections=stack_projections,
        norm_for_group=norm_for_group, group_linear=group_linear)


# What the arm runs, for the report (bench e2e names each arm's kernels).
KERNELS = {
    "fp8 linears": "torch._scaled_mm (cuBLASLt; q/k/v and gate/up stacked, rowwise scales) "
                   "after det's fused norm/silu-mul + FP8 quantize; det-suite's GEMM at M <= "
                   f"{DECODE_MAX_ROWS} (faster there)",
    "decode attention": "split-KV Triton (stock_decode_attention_split + _combine), splits "
                        "by batch, slice length by context, FP8 output fused",
    "prefill attention": "det's paged attention (bi_paged_attention)",
    "norms, q/k norm + RoPE + KV write": "det's row-local Triton kernels",
    "lm_head": "F.linear (cuBLAS BF16)",
    "log_softmax": "torch.log_softmax (fp32)",
}
