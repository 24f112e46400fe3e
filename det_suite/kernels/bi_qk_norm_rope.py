"""Batch-invariant q/k RMSNorm, RoPE and KV-cache write of one attention block, in one launch.

It computes, bit for bit, what the unfused sequence computes:

    q = rms_norm(q, q_weight); k = rms_norm(k, k_weight)       # bi_rmsnorm_kernel
    q, k = q * cos + rotate_half(q) * sin, (same for k)         # torch, in q's dtype
    k_cache[slot] = k; v_cache[slot] = v                         # index_copy_

One program owns one (token, head) row: programs with head < num_q_heads normalise and
rotate a query row into q_out; the others a key row, which goes to its cache slot together
with the value row. Nothing about the other rows reaches a row's arithmetic.

The norm is `rmsnorm_row`'s, the helpers bi_rmsnorm_kernel calls, launched with its BLOCK_H
and num_warps (ops.bi_launch_spec), so its sum of squares compiles to the same reduction.
RoPE follows torch's bf16/fp16 elementwise ops, each computed in fp32 and rounded once to
the dtype: p1 = round(x * cos), p2 = round(rotate_half(x) * sin), out = round(p1 + p2),
where rotate_half(x) = cat(-x[D/2:], x[:D/2]) (negation is exact). Each program reads its
row in two halves, so both elements a rotation pairs are normalised from the same row with
the same inv_rms. The value row is copied as it is.

The launch turns FMA contraction off (ops.bi_launch_spec): LLVM narrows each widen, op,
round to one bf16/fp16 instruction (exact: fp32 holds more than twice their precision),
and with contraction on, the backend then fuses p1's multiply into the add, skipping p1's
rounding. The norm's sum of squares is an explicit tl.fma, so it compiles as it does in
bi_rmsnorm_kernel either way.

With USE_PDL (programmatic dependent launch, SM90+) every program waits for the previous
grid before it touches memory (`grid_dependency.wait_for_previous_grid`), so the launch
may start while that grid drains; the arithmetic is the same either way.
"""

import triton
import triton.language as tl

from det_suite.kernels.grid_dependency import wait_for_previous_grid
from det_suite.kernels.rmsnorm_row import rms_apply, rms_inverse


@triton.jit
def _round(x, dtype: tl.constexpr):
    """x (fp32) rounded to dtype, widened back: one torch elementwise op's result."""
    return x.to(dtype).to(tl.float32)


@triton.jit
def bi_qk_norm_rope_kernel(
    q_ptr, k_ptr, v_ptr, q_weight_ptr, k_weight_ptr, cos_ptr, sin_ptr,
    k_cache_ptr, v_cache_ptr, slot_mapping_ptr, q_out_ptr,
    num_q_heads, head_dim, num_slots,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cos, stride_sin,
    stride_kcs, stride_kch, stride_vcs, stride_vch,
    stride_ot, stride_oh,
    eps,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    dtype: tl.constexpr = q_out_ptr.dtype.element_ty
    is_q_head = head < num_q_heads
    kv_head = head - num_q_heads
    slot = tl.load(slot_mapping_ptr + token)
    # A key/value row whose slot lies outside the cache is dropped rather than written over
    # another tensor's memory (the op rejects such slots before launch where it can read them).
    row_is_stored = is_q_head | ((slot >= 0) & (slot < num_slots))

    if is_q_head:
        x_row = q_ptr + token * stride_qt + head * stride_qh
        weight_ptr = q_weight_ptr
        out_row = q_out_ptr + token * stride_ot + head * stride_oh
    else:
        x_row = k_ptr + token * stride_kt + kv_head * stride_kh
        weight_ptr = k_weight_ptr
        out_row = k_cache_ptr + slot * stride_kcs + kv_head * stride_kch

    inv_rms = rms_inverse(x_row, head_dim, eps, BLOCK_H)

    half = head_dim // 2
    offs = tl.arange(0, BLOCK_HALF)
    col_exists = offs < half
    col_is_stored = col_exists & row_is_stored
    lo = tl.load(x_row + offs, mask=col_exists, other=0.0).to(tl.float32)
    hi = tl.load(x_row + half + offs, mask=col_exists, other=0.0).to(tl.float32)
    weight_lo = tl.load(weight_ptr + offs, mask=col_exists, other=0.0).to(tl.float32)
    weight_hi = tl.load(weight_ptr + half + offs, mask=col_exists, other=0.0).to(tl.float32)
    lo = rms_apply(lo, inv_rms, weight_lo, dtype).to(tl.float32)
    hi = rms_apply(hi, inv_rms, weight_hi, dtype).to(tl.float32)

    cos_row = cos_ptr + token * stride_cos
    sin_row = sin_ptr + token * stride_sin
    cos_lo = tl.load(cos_row + offs, mask=col_exists, other=0.0).to(tl.float32)
    cos_hi = tl.load(cos_row + half + offs, mask=col_exists, other=0.0).to(tl.float32)
    sin_lo = tl.load(sin_row + offs, mask=col_exists, other=0.0).to(tl.float32)
    sin_hi = tl.load(sin_row + half + offs, mask=col_exists, other=0.0).to(tl.float32)
    # rotate_half pairs lo with -hi and hi with lo. round(-hi * s) is -round(hi * s) and
    # a + (-b) is a - b, zero signs included; Triton's unary minus is 0 - x, whose +0 for
    # x = +0 would flip the sign of a zero result.
    out_lo = _round(lo * cos_lo, dtype) - _round(hi * sin_lo, dtype)
    out_hi = _round(hi * cos_hi, dtype) + _round(lo * sin_hi, dtype)
    tl.store(out_row + offs, out_lo.to(dtype), mask=col_is_stored)
    tl.store(out_row + half + offs, out_hi.to(dtype), mask=col_is_stored)

    if head >= num_q_heads:
        v_row = v_ptr + token * stride_vt + kv_head * stride_vh
        v_out_row = v_cache_ptr + slot * stride_vcs + kv_head * stride_vch
        tl.store(v_out_row + offs, tl.load(v_row + offs, mask=col_exists),
                 mask=col_is_stored)
        tl.store(v_out_row + half + offs, tl.load(v_row + half + offs, mask=col_exists),
                 mask=col_is_stored)
