"""Batch-invariant paged attention, split shape, second half: one program per (query row,
head) merges the segment states `bi_attention_split.py` wrote, in ascending order from
segment 0's, with the same `merge_segment` the tile kernel (`bi_attention.py`) merges with
in registers, and ends as the tile kernel ends (`attention_output`): acc / sum in q's
dtype, or with QUANTIZE_OUT that quantized for the o projection. The bits a prefill of the
same query has, either way.

It reads only the segments that hold the row's keys (0 .. position // SEGMENT, the ones the
split kernel wrote); the workspace's other entries are never initialised. No MMA: an
elementwise fp32 merge.
"""

import triton
import triton.language as tl

from det_suite.kernels.bi_attention_segment import (attention_output, merge_segment,
                                                    request_of_row)


@triton.jit
def bi_paged_attention_combine_kernel(
    seg_stats_ptr, seg_acc_ptr,
    context_lens_ptr, query_starts_ptr,
    num_requests,
    stride_st, stride_sh, stride_ss,
    stride_at, stride_ah, stride_as,
    q_ptr,  # never read: its dtype is the one the output is rounded to
    out_ptr, out_scale_ptr,
    stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr,
    SEGMENT: tl.constexpr,
    QUANTIZE_OUT: tl.constexpr, FP8_MAX: tl.constexpr,
):
    row = tl.program_id(0)
    head = tl.program_id(1)

    request = request_of_row(query_starts_ptr, row, num_requests)
    position = tl.load(context_lens_ptr + request) + row - tl.load(query_starts_ptr + request)
    segments = position // SEGMENT + 1

    # The state as one-row tensors: the shapes merge_segment takes in the tile kernel.
    one = tl.arange(0, 1)
    offs_d = tl.arange(0, HEAD_DIM)
    stats = seg_stats_ptr + row.to(tl.int64) * stride_st + head * stride_sh + one
    acc_row = seg_acc_ptr + row.to(tl.int64) * stride_at + head * stride_ah
    row_max = tl.load(stats)
    row_sum = tl.load(stats + 1)
    acc = tl.load(acc_row + one[:, None] * 0 + offs_d[None, :])
    for segment in range(1, segments):
        seg_max = tl.load(stats + segment * stride_ss)
        seg_sum = tl.load(stats + segment * stride_ss + 1)
        seg_acc = tl.load(acc_row + segment * stride_as + one[:, None] * 0 + offs_d[None, :])
        row_max, row_sum, acc = merge_segment(row_max, row_sum, acc, seg_max, seg_sum, seg_acc)

    out = attention_output(acc, row_sum, q_ptr.dtype.element_ty, out_scale_ptr,
                           QUANTIZE_OUT, FP8_MAX)
    tl.store(out_ptr + row.to(tl.int64) * stride_ot + head * stride_oh
             + one[:, None] * 0 + offs_d[None, :], out.to(out_ptr.dtype.element_ty))
