"""Batch-invariant log_softmax over the last dimension, in fp32, second half:

    out = x - (max(x) + log(sum(exp(x - max(x)))))

One program per (row, slice of SLICE_V positions). Each reads the row's slice states that
`bi_log_softmax_partials.py` wrote, merges them into the row's normaliser, and writes its
own slice of the output. The merge is one fixed expression over SLICES slots (the number
of slices rounded up to a power of two; unused slots hold max -inf and sum 0 and add an
exact 0):

    row_max = max over slices of slice_max
    total   = sum over slices of slice_sum * exp(slice_max - row_max)   (one tl.sum)

SLICE_V, BLOCK_V, SLICES and the warps depend on V only, so every program of a row (and
every row of any call) computes the same normaliser in the same order, and nothing of
another row reaches it: batch-invariant, and the same bits whichever program writes which
slice.

With USE_PDL (programmatic dependent launch, SM90+) every program waits for the previous
grid (the partials) before it touches memory (`grid_dependency.wait_for_previous_grid`).
"""

import triton
import triton.language as tl

from det_suite.kernels.grid_dependency import wait_for_previous_grid


@triton.jit
def bi_log_softmax_kernel(
    x_ptr, stats_ptr, out_ptr,
    V,
    stride_xm, stride_sm, stride_om,
    SLICE_V: tl.constexpr,
    BLOCK_V: tl.constexpr,
    SLICES: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    slice_id = tl.program_id(1)

    offs_s = tl.arange(0, SLICES)
    slice_exists = offs_s < tl.cdiv(V, SLICE_V)
    stats = stats_ptr + row * stride_sm + offs_s * 2
    slice_max = tl.load(stats, mask=slice_exists, other=float("-inf"))
    slice_sum = tl.load(stats + 1, mask=slice_exists, other=0.0)
    row_max = tl.max(slice_max, axis=0)
    total = tl.sum(slice_sum * tl.exp(slice_max - row_max), axis=0)
    log_normalizer = row_max + tl.log(total)

    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    start = slice_id * SLICE_V
    stop = tl.minimum(start + SLICE_V, V)
    offs = tl.arange(0, BLOCK_V)
    for v0 in range(start, stop, BLOCK_V):
        col_exists = (v0 + offs) < stop
        x = tl.load(x_row + v0 + offs, mask=col_exists, other=0.0)
        tl.store(out_row + v0 + offs, x.to(tl.float32) - log_normalizer, mask=col_exists)
