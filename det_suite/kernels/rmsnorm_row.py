"""The arithmetic of one RMSNorm row, shared by every kernel that normalises rows.

Kernels that must produce bi_rmsnorm_kernel's bits (the fused norms) call these helpers
with its BLOCK_H and launch with its num_warps: the sum of squares then compiles to the same
lanes and the same tl.sum reduction tree, which is what fixes its rounding. Written once,
so they cannot drift apart.
"""

import triton
import triton.language as tl


@triton.jit
def row_loads(x_row, delta_row, cols, col_exists, HAS_DELTA: tl.constexpr):
    """The raw loads `row_values` combines: x at cols and, with HAS_DELTA, delta (else x
    again, never loaded twice: the compiler reuses it)."""
    x = tl.load(x_row + cols, mask=col_exists, other=0.0)
    delta = x
    if HAS_DELTA:
        delta = tl.load(delta_row + cols, mask=col_exists, other=0.0)
    return x, delta


@triton.jit
def row_sum(x, delta, HAS_DELTA: tl.constexpr):
    """x, or with HAS_DELTA the residual sum x + delta exactly as torch's `x + delta`
    makes it (an fp32 add, one rounding to the dtype), so a fused add hands the norm the
    tensor the unfused add would."""
    if HAS_DELTA:
        # LLVM may fold this into one native add (SM90: add.bf16x2): the same value, as
        # fp32 carries 2p + 2 bits of a bf16/fp16 significand, so the two roundings here
        # give the one rounding of the exact sum.
        x = (x.to(tl.float32) + delta.to(tl.float32)).to(x.dtype)
    return x


@triton.jit
def row_values(x_row, delta_row, cols, col_exists, HAS_DELTA: tl.constexpr):
    """The row's elements at cols, in x's dtype: x, or with HAS_DELTA x + delta
    (`row_sum` of `row_loads`)."""
    x, delta = row_loads(x_row, delta_row, cols, col_exists, HAS_DELTA)
    return row_sum(x, delta, HAS_DELTA)


@triton.jit
def rms_inverse_of(x_row, delta_row, H, eps, BLOCK_H: tl.constexpr, HAS_DELTA: tl.constexpr):
    """1 / sqrt(mean(v^2) + eps) of the H elements `row_values` reads (x, or x + delta),
    in fp32. The squares are kept in BLOCK_H fp32 lanes over ascending BLOCK_H chunks and
    folded once at the end, whether or not a delta is added first: a fused residual add
    reduces the sum exactly as the norm of the stored sum would."""
    offs = tl.arange(0, BLOCK_H)
    square_lanes = tl.zeros((BLOCK_H,), dtype=tl.float32)
    # Loads run one chunk ahead of the squares: a loop that loads a chunk and then squares
    # it waits one memory latency per chunk (a decode row is a few chunks and nothing else
    # to hide it behind). The squares and their order are the same.
    x, delta = row_loads(x_row, delta_row, offs, offs < H, HAS_DELTA)
    for h0 in range(BLOCK_H, H + BLOCK_H, BLOCK_H):
        next_exists = (h0 + offs) < H
        x_next, delta_next = row_loads(x_row + h0, delta_row + h0, offs, next_exists,
                                       HAS_DELTA)
        h = row_sum(x, delta, HAS_DELTA).to(tl.float32)
        # The FMA a GPU contracts `lanes + h * h` into, written out: a kernel compiled
        # without contraction (to keep other roundings apart) still sums the same way.
        square_lanes = tl.fma(h, h, square_lanes)
        x, delta = x_next, delta_next
    variance = tl.sum(square_lanes, axis=0) / H
    return 1.0 / tl.sqrt_rn(variance + eps)


@triton.jit
def rms_inverse(x_row, H, eps, BLOCK_H: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) of the H elements at x_row, in fp32 (`rms_inverse_of`
    without a delta)."""
    return rms_inverse_of(x_row, x_row, H, eps, BLOCK_H, False)


@triton.jit
def rms_apply(h, inv_rms, weight, out_dtype: tl.constexpr):
    """weight * (h * inv_rms) for fp32 h and weight, rounded to out_dtype."""
    # Round to the input dtype before the weight multiply, as transformers does.
    normed = (h * inv_rms).to(out_dtype).to(tl.float32)
    return (weight * normed).to(out_dtype)
