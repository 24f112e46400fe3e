"""Batch-invariant RMSNorm, in the order of transformers' Qwen3RMSNorm:

    h = x.float(); h = h * rsqrt(mean(h * h) + eps); out = weight * h.to(x.dtype)

One program normalises one row, so nothing about the other rows (how many, which) can
reach a row's arithmetic. The sum of squares is kept in BLOCK_H fp32 lanes over ascending
BLOCK_H chunks of the row and folded once at the end: the order depends on (H, BLOCK_H),
never on the number of rows.
"""

import triton
import triton.language as tl


@triton.jit
def bi_rmsnorm_kernel(
    x_ptr, weight_ptr, out_ptr,
    H,
    stride_xm, stride_om,
    eps,
    BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK_H)

    square_lanes = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        col_exists = (h0 + offs) < H
        h = tl.load(x_row + h0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        square_lanes += h * h
    variance = tl.sum(square_lanes, axis=0) / H
    inv_rms = 1.0 / tl.sqrt_rn(variance + eps)

    for h0 in range(0, H, BLOCK_H):
        col_exists = (h0 + offs) < H
        h = tl.load(x_row + h0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        # Round to the input dtype before the weight multiply, as transformers does.
        normed = (h * inv_rms).to(out_ptr.dtype.element_ty).to(tl.float32)
        weight = tl.load(weight_ptr + h0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        tl.store(out_row + h0 + offs, (weight * normed).to(out_ptr.dtype.element_ty),
                 mask=col_exists)
