"""RMSNorm whose output goes straight to FP8 linears: the normed row quantized once per
consumer, in the same pass.

    q_i = fp8(clamp(rms_norm(x, weight) / input_scale_i, -448, 448)),  i < NUM_OUT (1..3)

byte for byte `quantize_fp8(bi_rms_norm(x, weight, eps), input_scale_i)`: the row arithmetic
is `rmsnorm_row`'s (the helpers `bi_rmsnorm_kernel` calls, launched with its BLOCK_H and
warps, so the same reduction tree), the normed value is rounded to x's dtype as the norm's
output is, and quantization is `fp8_quantize`'s definition. A decoder layer's q/k/v (or
gate/up) projections read one normed input with one input scale each: their quantized
inputs come from one launch instead of a norm and three quantizations.

With HAS_RESIDUAL the row normed is the residual sum x + delta (torch's `x + delta`: fp32
add, one rounding to the dtype), also stored to sum: the layer's residual add and the norm
after it in one launch, the norm reading the sum as if the add had stored it first.

Programs are (row, BLOCK_H columns). A decode step has a handful of rows, so one program
per row would leave the GPU idle while each walks H alone; instead every program of a row
recomputes the row's rms (H elements, from L2) and writes only its columns. The rms depends
on (H, BLOCK_H, warps) only, so every program of a row has the same one, and nothing of
another row reaches it: batch-invariant like the norm it fuses.

With USE_PDL (programmatic dependent launch, SM90+) every program waits for the previous
grid before it touches memory (`grid_dependency.wait_for_previous_grid`), so the launch
may start while that grid drains; the arithmetic is the same either way.
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_quantize import quantize_to_e4m3_grid
from det_suite.kernels.grid_dependency import wait_for_previous_grid
from det_suite.kernels.rmsnorm_row import rms_apply, rms_inverse_of, row_values


@triton.jit
def _store_quantized(q_ptr, scale_ptr, normed, col_exists, FP8_MAX: tl.constexpr):
    rounded = quantize_to_e4m3_grid(normed, tl.load(scale_ptr), FP8_MAX)
    tl.store(q_ptr, rounded.to(q_ptr.dtype.element_ty), mask=col_exists)


@triton.jit
def bi_rmsnorm_quantize_kernel(
    x_ptr, delta_ptr, weight_ptr, sum_ptr,
    q0_ptr, q1_ptr, q2_ptr, scale0_ptr, scale1_ptr, scale2_ptr,
    H,
    stride_xm, stride_dm, stride_sm, stride_qm,
    eps,
    NUM_OUT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    FP8_MAX: tl.constexpr,
    BLOCK_H: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    delta_row = delta_ptr + row * stride_dm

    # Every program of a row reduces the whole row, with the norm's helper and tile: each
    # gets the one-program norm's rms bit for bit, whichever columns it then writes.
    # This program's columns and weights are loaded before the row's reduction, which does
    # not need them: their latency hides behind it instead of following it.
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    col_exists = cols < H
    value = row_values(x_row, delta_row, cols, col_exists, HAS_RESIDUAL)
    weight = tl.load(weight_ptr + cols, mask=col_exists, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        tl.store(sum_ptr + row * stride_sm + cols, value, mask=col_exists)

    inv_rms = rms_inverse_of(x_row, delta_row, H, eps, BLOCK_H, HAS_RESIDUAL)

    normed = rms_apply(value.to(tl.float32), inv_rms, weight, x_ptr.dtype.element_ty)
    q_cols = row * stride_qm + cols
    _store_quantized(q0_ptr + q_cols, scale0_ptr, normed, col_exists, FP8_MAX)
    if NUM_OUT > 1:
        _store_quantized(q1_ptr + q_cols, scale1_ptr, normed, col_exists, FP8_MAX)
    if NUM_OUT > 2:
        _store_quantized(q2_ptr + q_cols, scale2_ptr, normed, col_exists, FP8_MAX)
