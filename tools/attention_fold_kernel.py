"""A prototype for issue 15: the decode attention's combine folded into its split kernel, so a
decode layer has one attention launch instead of two (the combine costs 1.7 us a layer at
prefix 128 and 3.5 us at 2048 on the H200, docs/decode-step-kernels.md).

Each program reduces its segment exactly as `bi_paged_attention_split_kernel` does
(`attend_segment`, the same tile), then:

- a row whose keys fit one segment (segments == 1) has no merge to wait for: the program
  ends as the combine would (`attention_output` of its own state, which is what the combine
  computes from segment 0's stored state alone: fp32 stores and loads are exact);
- otherwise it stores its state to the workspace and counts itself in, per (row, head
  group), with an acq_rel atomic (the pattern of `fp8_epilogue.finish_split_k_tile`). The
  program that arrives last merges segments 0 .. segments - 1 from the workspace in
  ascending order with the combine's `merge_segment` and `attention_output`, and re-arms
  the counter. Which program arrives last never changes the bits: the merge reads every
  segment from memory, in the one order.

Rows are elementwise in the merge and the epilogue (no reduction across rows), so merging a
program's HEADS rows as one (BLOCK_Q, ...) tensor gives each head the combine's one-row bits.
USE_PDL: the program waits for the previous grid before its first load
(`grid_dependency.wait_for_previous_grid`), so the launch may overlap its predecessor's.

Not a det_suite kernel: `tools/attention_decode_sweep.py` (arms fold, fold-pdl) and
`tools/decode_schedule_sweep.py` price it against the shipped pair with the shipped bits
required; a winner moves into det_suite with an H200 evidence run.
"""

import triton
import triton.language as tl

from det_suite.kernels.bi_attention_segment import (attend_segment, attention_output,
                                                    merge_segment, request_of_row)
from det_suite.kernels.grid_dependency import wait_for_previous_grid


@triton.jit
def bi_paged_attention_fold_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr,
    block_tables_ptr, context_lens_ptr, query_starts_ptr,
    scale,
    num_requests, block_size,
    stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_bt,
    seg_stats_ptr, seg_acc_ptr,
    stride_st, stride_sh, stride_ss,
    stride_at, stride_ah, stride_as,
    counters_ptr,
    out_ptr, out_scale_ptr,
    stride_ot, stride_oh,
    GROUP: tl.constexpr, HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr,
    SEGMENT: tl.constexpr,
    QUANTIZE_OUT: tl.constexpr, FP8_MAX: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    tl.static_assert(HEADS <= BLOCK_Q)
    tl.static_assert(GROUP % HEADS == 0)  # a program's heads share one KV head
    wait_for_previous_grid(USE_PDL)
    row = tl.program_id(0)
    group = tl.program_id(1)
    first_head = group * HEADS
    segment = tl.program_id(2)

    request = request_of_row(query_starts_ptr, row, num_requests)
    q_first = tl.load(query_starts_ptr + request)
    q_len = tl.load(query_starts_ptr + request + 1) - q_first
    context = tl.load(context_lens_ptr + request)
    position = context + row - q_first
    seg_start = segment * SEGMENT
    if seg_start > position:
        return

    offs_q = tl.arange(0, BLOCK_Q)
    row_is_head = offs_q < HEADS
    head = first_head + offs_q
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + row.to(tl.int64) * stride_qt + head[:, None] * stride_qh
                + offs_d[None, :], mask=row_is_head[:, None], other=0.0)
    block_table = block_tables_ptr + request.to(tl.int64) * stride_bt
    seg_max, seg_sum, seg_acc = attend_segment(
        q, position + offs_q * 0, seg_start, tl.minimum(position + 1, seg_start + SEGMENT),
        context + q_len, scale, k_cache_ptr, v_cache_ptr, block_table, first_head // GROUP,
        block_size, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        BLOCK_Q, BLOCK_KV, HEAD_DIM, SEGMENT)

    segments = position // SEGMENT + 1
    out_rows = (out_ptr + row.to(tl.int64) * stride_ot + head[:, None] * stride_oh
                + offs_d[None, :])
    if segments == 1:
        out = attention_output(seg_acc, seg_sum, q_ptr.dtype.element_ty, out_scale_ptr,
                               QUANTIZE_OUT, FP8_MAX)
        tl.store(out_rows, out.to(out_ptr.dtype.element_ty), mask=row_is_head[:, None])
    else:
        stats = (seg_stats_ptr + row.to(tl.int64) * stride_st + head * stride_sh)
        acc_rows = (seg_acc_ptr + row.to(tl.int64) * stride_at + head[:, None] * stride_ah
                    + offs_d[None, :])
        tl.store(stats + segment * stride_ss, seg_max, mask=row_is_head)
        tl.store(stats + segment * stride_ss + 1, seg_sum, mask=row_is_head)
        tl.store(acc_rows + segment * stride_as, seg_acc, mask=row_is_head[:, None])
        # Every thread's stores must be issued before the release below publishes them.
        tl.debug_barrier()
        counter = counters_ptr + row.to(tl.int64) * tl.num_programs(1) + group
        arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
        if arrived == segments - 1:
            # .cg reads L2, never a stale L1 line of another SM's segment.
            row_max = tl.load(stats, mask=row_is_head, other=0.0, cache_modifier=".cg")
            row_sum = tl.load(stats + 1, mask=row_is_head, other=1.0, cache_modifier=".cg")
            acc = tl.load(acc_rows, mask=row_is_head[:, None], other=0.0,
                          cache_modifier=".cg")
            for s in range(1, segments):
                row_max, row_sum, acc = merge_segment(
                    row_max, row_sum, acc,
                    tl.load(stats + s * stride_ss, mask=row_is_head, other=0.0,
                            cache_modifier=".cg"),
                    tl.load(stats + s * stride_ss + 1, mask=row_is_head, other=1.0,
                            cache_modifier=".cg"),
                    tl.load(acc_rows + s * stride_as, mask=row_is_head[:, None], other=0.0,
                            cache_modifier=".cg"))
            out = attention_output(acc, row_sum, q_ptr.dtype.element_ty, out_scale_ptr,
                                   QUANTIZE_OUT, FP8_MAX)
            tl.store(out_rows, out.to(out_ptr.dtype.element_ty), mask=row_is_head[:, None])
            # Re-arm the counter for the next launch (and the next CUDA Graph replay).
            tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")

