"""RMSNorm whose output goes straight to FP8 linears: the normed row quantized once per
consumer, in the same pass.

    q_i = fp8(clamp(rms_norm(x, weight) / input_scale_i, -448, 448)),  i < NUM_OUT (1..3)

byte for byte `quantize_fp8(bi_rms_norm(x, weight, eps), input_scale_i)`: the row arithmetic
is `rmsnorm_row`'s (the helpers `bi_rmsnorm_kernel` calls, launched with its BLOCK_H and
warps, so the same reduction tree), the normed value is rounded to x's dtype as the norm's
output is, and quantization is `fp8_quantize`'s definition. A decoder layer's q/k/v (or
gate/up) projections read one normed input with one input scale each: their quantized
inputs come from one launch instead of a norm and three quantizations.

One program per row: batch-invariant like the norm it fuses.
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_quantize import quantize_to_e4m3_grid
from det_suite.kernels.rmsnorm_row import rms_apply, rms_inverse


@triton.jit
def _store_quantized(q_ptr, scale_ptr, normed, col_exists, FP8_MAX: tl.constexpr):
    rounded = quantize_to_e4m3_grid(normed, tl.load(scale_ptr), FP8_MAX)
    tl.store(q_ptr, rounded.to(q_ptr.dtype.element_ty), mask=col_exists)


@triton.jit
def bi_rmsnorm_quantize_kernel(
    x_ptr, weight_ptr,
    q0_ptr, q1_ptr, q2_ptr, scale0_ptr, scale1_ptr, scale2_ptr,
    H,
    stride_xm, stride_qm,
    eps,
    NUM_OUT: tl.constexpr,
    FP8_MAX: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    q_row = row * stride_qm
    offs = tl.arange(0, BLOCK_H)

    inv_rms = rms_inverse(x_row, H, eps, BLOCK_H)

    for h0 in range(0, H, BLOCK_H):
        col_exists = (h0 + offs) < H
        h = tl.load(x_row + h0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        weight = tl.load(weight_ptr + h0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        normed = rms_apply(h, inv_rms, weight, x_ptr.dtype.element_ty)
        _store_quantized(q0_ptr + q_row + h0 + offs, scale0_ptr, normed, col_exists, FP8_MAX)
        if NUM_OUT > 1:
            _store_quantized(q1_ptr + q_row + h0 + offs, scale1_ptr, normed, col_exists,
                             FP8_MAX)
        if NUM_OUT > 2:
            _store_quantized(q2_ptr + q_row + h0 + offs, scale2_ptr, normed, col_exists,
                             FP8_MAX)
