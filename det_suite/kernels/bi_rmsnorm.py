"""Batch-invariant RMSNorm, in the order of transformers' Qwen3RMSNorm:

    h = x.float(); h = h * rsqrt(mean(h * h) + eps); out = weight * h.to(x.dtype)

One program normalises one row, so nothing about the other rows (how many, which) can
reach a row's arithmetic. The sum of squares is kept in BLOCK_H fp32 lanes over ascending
BLOCK_H chunks of the row and folded once at the end: the order depends on (H, BLOCK_H),
never on the number of rows. The row arithmetic lives in `rmsnorm_row`, shared with the
fused kernels that must reproduce these bits.

With USE_PDL (programmatic dependent launch, SM90+) every program waits for the previous
grid before it touches memory (`grid_dependency.wait_for_previous_grid`), so the launch
may start while that grid drains; the arithmetic is the same either way.
"""

import triton
import triton.language as tl

from det_suite.kernels.grid_dependency import wait_for_previous_grid
from det_suite.kernels.rmsnorm_row import rms_apply, rms_inverse


@triton.jit
def bi_rmsnorm_kernel(
    x_ptr, weight_ptr, out_ptr,
    H,
    stride_xm, stride_om,
    eps,
    BLOCK_H: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK_H)

    inv_rms = rms_inverse(x_row, H, eps, BLOCK_H)

    for h0 in range(0, H, BLOCK_H):
        col_exists = (h0 + offs) < H
        h = tl.load(x_row + h0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        weight = tl.load(weight_ptr + h0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        tl.store(out_row + h0 + offs, rms_apply(h, inv_rms, weight, out_ptr.dtype.element_ty),
                 mask=col_exists)
