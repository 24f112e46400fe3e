"""The arithmetic of one RMSNorm row, shared by every kernel that normalises rows.

Kernels that must produce bi_rmsnorm_kernel's bits (the fused norms) call these helpers
with its BLOCK_H and launch with its num_warps: the sum of squares then compiles to the same
lanes and the same tl.sum reduction tree, which is what fixes its rounding. Written once,
so they cannot drift apart.
"""

import triton
import triton.language as tl


@triton.jit
def rms_inverse(x_row, H, eps, BLOCK_H: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) of the H elements at x_row, in fp32. The squares are kept
    in BLOCK_H fp32 lanes over ascending BLOCK_H chunks and folded once at the end."""
    offs = tl.arange(0, BLOCK_H)
    square_lanes = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        col_exists = (h0 + offs) < H
        h = tl.load(x_row + h0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        # The FMA a GPU contracts `lanes + h * h` into, written out: a kernel compiled
        # without contraction (to keep other roundings apart) still sums the same way.
        square_lanes = tl.fma(h, h, square_lanes)
    variance = tl.sum(square_lanes, axis=0) / H
    return 1.0 / tl.sqrt_rn(variance + eps)


@triton.jit
def rms_apply(h, inv_rms, weight, out_dtype: tl.constexpr):
    """weight * (h * inv_rms) for fp32 h and weight, rounded to out_dtype."""
    # Round to the input dtype before the weight multiply, as transformers does.
    normed = (h * inv_rms).to(out_dtype).to(tl.float32)
    return (weight * normed).to(out_dtype)
