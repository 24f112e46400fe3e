"""Batch-invariant log_softmax, first half: one program per (row, slice of the vocabulary)
reduces its slice to (max, sum of exp(x - max)) in fp32; `bi_log_softmax.py` merges a row's
slices and writes the output.

A row is cut into slices of SLICE_V positions (0, SLICE_V, 2 * SLICE_V, ...), a constant
of the op: how a row is split depends on V alone, never on how many rows the call holds, so
every row of any call has one order of operations. Inside a slice the max and the sum are
kept in BLOCK_V fp32 lanes walked in ascending chunks and folded once.

Why slices: one program per row walked the whole row three times alone (a 152k-entry
vocabulary is ~40 sequential chunks a pass): a decode step's lm_head output took ~62 us on
the H200 for 600 KB. Slices spread a row over as many programs as it has slices.

A slice with no finite logit (all -inf) has max -inf; it subtracts 0 instead, so its sum is
an exact 0 rather than NaN (-inf - -inf), and it adds nothing to the row.

With USE_PDL (programmatic dependent launch, SM90+) every program waits for the previous
grid before it touches memory (`grid_dependency.wait_for_previous_grid`).
"""

import triton
import triton.language as tl

from det_suite.kernels.grid_dependency import wait_for_previous_grid


@triton.jit
def bi_log_softmax_partials_kernel(
    x_ptr, stats_ptr,
    V,
    stride_xm, stride_sm,
    SLICE_V: tl.constexpr,
    BLOCK_V: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    slice_id = tl.program_id(1)
    x_row = x_ptr + row * stride_xm
    start = slice_id * SLICE_V
    stop = tl.minimum(start + SLICE_V, V)
    offs = tl.arange(0, BLOCK_V)

    max_lanes = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
    for v0 in range(start, stop, BLOCK_V):
        x = tl.load(x_row + v0 + offs, mask=(v0 + offs) < stop, other=float("-inf"))
        max_lanes = tl.maximum(max_lanes, x.to(tl.float32))
    slice_max = tl.max(max_lanes, axis=0)
    shift = tl.where(slice_max == float("-inf"), 0.0, slice_max)

    exp_lanes = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for v0 in range(start, stop, BLOCK_V):  # the slice again, from L1/L2
        x = tl.load(x_row + v0 + offs, mask=(v0 + offs) < stop, other=float("-inf"))
        exp_lanes += tl.exp(x.to(tl.float32) - shift)  # past the end: exp(-inf) = 0
    slice_sum = tl.sum(exp_lanes, axis=0)

    stats = stats_ptr + row * stride_sm + slice_id * 2
    tl.store(stats, slice_max)
    tl.store(stats + 1, slice_sum)
