"""Batch-invariant paged attention, split shape, its end: the ordered merge of a query row's
segment states from the workspace `bi_attention_split.py` writes. The split kernel's last
program of a (row, KV-head tile) to arrive calls it for the tile's query heads, so no
second launch merges them.

`combine_segments` merges segments 0 .. segments - 1 in ascending order from segment 0's
state, with the same `merge_segment` the tile kernel (`bi_attention.py`) merges with in
registers, and ends as the tile kernel ends (`attention_output`): acc / sum in q's dtype,
or with QUANTIZE_OUT that quantized for the o projection. The bits a prefill of the same
query has, either way: the merge is elementwise per (row, head), so neither the order in
which programs arrive nor which program merges reaches it.

It reads only the segments that hold the row's keys (the ones the split kernel wrote); the
workspace's other entries are never initialised. Its loads bypass L1 (`.cg`): the segments
were stored by other programs, possibly on other SMs, and reach this one through L2.
"""

import triton
import triton.language as tl

from det_suite.kernels.bi_attention_segment import attention_output, merge_segment


@triton.jit
def combine_segments(stats_rows, acc_rows, segments, stride_ss, stride_as, row_is_query,
                     act_dtype: tl.constexpr, out_rows, out_scale_ptr,
                     QUANTIZE_OUT: tl.constexpr, FP8_MAX: tl.constexpr):
    """Merge rows' segments 0 .. segments - 1 and store their output: stats_rows (N,)
    point at each row's segment-0 (max, sum), acc_rows (N, HEAD_DIM) at its segment-0
    accumulator, out_rows (N, HEAD_DIM) at its output; rows where row_is_query is false
    are neither read nor stored."""
    # Rows that are no query read a sum of 1, so their (never stored) output stays finite.
    row_max = tl.load(stats_rows, mask=row_is_query, other=0.0, cache_modifier=".cg")
    row_sum = tl.load(stats_rows + 1, mask=row_is_query, other=1.0, cache_modifier=".cg")
    acc = tl.load(acc_rows, mask=row_is_query[:, None], other=0.0, cache_modifier=".cg")
    for segment in range(1, segments):
        seg_max = tl.load(stats_rows + segment * stride_ss, mask=row_is_query, other=0.0,
                          cache_modifier=".cg")
        seg_sum = tl.load(stats_rows + segment * stride_ss + 1, mask=row_is_query, other=1.0,
                          cache_modifier=".cg")
        seg_acc = tl.load(acc_rows + segment * stride_as, mask=row_is_query[:, None],
                          other=0.0, cache_modifier=".cg")
        row_max, row_sum, acc = merge_segment(row_max, row_sum, acc, seg_max, seg_sum, seg_acc)

    out = attention_output(acc, row_sum, act_dtype, out_scale_ptr, QUANTIZE_OUT, FP8_MAX)
    tl.store(out_rows, out.to(out_rows.dtype.element_ty), mask=row_is_query[:, None])
