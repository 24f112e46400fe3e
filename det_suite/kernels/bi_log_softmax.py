"""Batch-invariant log_softmax over the last dimension, in fp32:

    out = x - (max(x) + log(sum(exp(x - max(x)))))

One program per row, three passes over it in ascending BLOCK_V chunks (max, sum of exps,
write). Max and sum are kept in BLOCK_V fp32 lanes and folded once, so a row's order of
operations depends on (V, BLOCK_V) only, never on how many rows the call holds.
"""

import triton
import triton.language as tl


@triton.jit
def bi_log_softmax_kernel(
    x_ptr, out_ptr,
    V,
    stride_xm, stride_om,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK_V)

    max_lanes = tl.full((BLOCK_V,), float("-inf"), dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        col_exists = (v0 + offs) < V
        x = tl.load(x_row + v0 + offs, mask=col_exists, other=float("-inf")).to(tl.float32)
        max_lanes = tl.maximum(max_lanes, x)
    row_max = tl.max(max_lanes, axis=0)

    exp_lanes = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        col_exists = (v0 + offs) < V
        x = tl.load(x_row + v0 + offs, mask=col_exists, other=float("-inf")).to(tl.float32)
        exp_lanes += tl.exp(x - row_max)  # masked lanes: exp(-inf) = 0
    log_normalizer = row_max + tl.log(tl.sum(exp_lanes, axis=0))

    for v0 in range(0, V, BLOCK_V):
        col_exists = (v0 + offs) < V
        x = tl.load(x_row + v0 + offs, mask=col_exists, other=0.0).to(tl.float32)
        tl.store(out_row + v0 + offs, x - log_normalizer, mask=col_exists)
