"""Batch-invariant log_softmax over the last dimension, in fp32:

    out = x - (max(x) + log(sum(exp(x - max(x)))))

One program per row, three passes over it in ascending BLOCK_V chunks (max, sum of exps,
write). Max and sum are kept in BLOCK_V fp32 lanes and folded once, so a row's order of
operations depends on (V, BLOCK_V) only, never on how many rows the call holds.

With USE_PDL (programmatic dependent launch, SM90+) every program waits for the previous
grid before it touches memory (`grid_dependency.wait_for_previous_grid`), so the launch
may start while that grid drains; the arithmetic is the same either way.
"""

import triton
import triton.language as tl

from det_suite.kernels.grid_dependency import wait_for_previous_grid


@triton.jit
def bi_log_softmax_kernel(
    x_ptr, out_ptr,
    V,
    stride_xm, stride_om,
    BLOCK_V: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK_V)

    # Every pass loads one chunk ahead of its arithmetic: a loop that loads a chunk and
    # then uses it waits one memory latency per chunk, and a row is ~40 chunks walked by one
    # program. The operations and their order are the same.
    max_lanes = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
    x = tl.load(x_row + offs, mask=offs < V, other=float("-inf"))
    for v0 in range(BLOCK_V, V + BLOCK_V, BLOCK_V):
        x_next = tl.load(x_row + v0 + offs, mask=(v0 + offs) < V, other=float("-inf"))
        max_lanes = tl.maximum(max_lanes, x.to(tl.float32))
        x = x_next
    row_max = tl.max(max_lanes, axis=0)

    exp_lanes = tl.zeros((BLOCK_V,), dtype=tl.float32)
    x = tl.load(x_row + offs, mask=offs < V, other=float("-inf"))
    for v0 in range(BLOCK_V, V + BLOCK_V, BLOCK_V):
        x_next = tl.load(x_row + v0 + offs, mask=(v0 + offs) < V, other=float("-inf"))
        exp_lanes += tl.exp(x.to(tl.float32) - row_max)  # masked lanes: exp(-inf) = 0
        x = x_next
    log_normalizer = row_max + tl.log(tl.sum(exp_lanes, axis=0))

    x = tl.load(x_row + offs, mask=offs < V, other=0.0)
    for v0 in range(0, V, BLOCK_V):
        col_exists = (v0 + offs) < V
        x_next = tl.load(x_row + v0 + BLOCK_V + offs, mask=(v0 + BLOCK_V + offs) < V,
                         other=0.0)
        tl.store(out_row + v0 + offs, x.to(tl.float32) - log_normalizer, mask=col_exists)
        x = x_next
