"""Batch-invariant paged attention, split shape: one program per (query row, KV head,
segment) reduces that segment of the row's keys, for every query head that reads the KV
head, into an fp32 workspace; the last program of the row and KV head to arrive merges the
row's segments in ascending order and stores the output (`bi_attention_combine.py`). One
launch: the split-K "fused fix-up" the FP8 GEMM's split programs end with
(`fp8_epilogue.finish_split_k_tile`).

The op launches this shape for decode calls (one query per request), where the tile kernel
(`bi_attention.py`) would run one program per head and walk the whole context serially.
Each program computes exactly what the tile kernel computes for its rows and segment
(`bi_attention_segment.attend_segment`, the same BLOCK_Q-row MMA tile), and the merge is
the tile kernel's `merge_segment` in its order, so the output has the bits a prefill of the
same query has: see `bi_attention.py` for why those depend on nothing but the row's q and
its K/V.

Packing a GQA group: the GROUP query heads of KV head h (h * GROUP .. h * GROUP + GROUP - 1)
sit in rows 0 .. GROUP - 1 of the tile, all at the row's position, and share one pass over
the segment's K/V (loaded once, not once per head). This keeps every head's bits: a row of
an MMA's output depends only on that row of q and on K/V (the tile kernel relies on the
same to put a query in whichever row its position gives), and the softmax state (max, sum,
accumulator) is kept per row, so which row a head takes and what the other rows hold do
not reach it. Rows past GROUP load zeros and are never stored. A group wider than BLOCK_Q
takes QUERY_TILES = ceil(GROUP / BLOCK_Q) programs, BLOCK_Q heads each.

The grid (T, Hkv * QUERY_TILES, MAX_SEGMENTS) is static: MAX_SEGMENTS covers block_tables'
width times the page size, so no device-to-host copy sizes it and the launch can be
captured in a CUDA graph. A program whose segment starts past its row's position returns
at once: it writes nothing and does not count. The row's live segments are
0 .. position // SEGMENT.

Finishing a row: each live program stores its segment's state, then adds one to the
arrival counter of its (row, KV-head tile) with an acq_rel atomic. The program that reads
live - 1 (the last to arrive, whichever segment it reduced) sees every other program's
store, merges segments 0 .. live - 1 for its query heads, stores the output and resets the
counter to 0, so counters are zero between launches and every CUDA Graph replay finds them
so (`ops.launch.split_k_counters`, one buffer per device, shared with the GEMM). A row of
one live segment has nothing to merge: its program ends the row from its registers, the
output the merge of that one segment gives, and touches neither workspace nor counter.

Workspace, fp32, one entry per (row, query head, segment): seg_stats (T, Hq, S, 2) holds
the segment's max and sum, seg_acc (T, Hq, S, HEAD_DIM) its unnormalised output; counters
int32, one per (row, KV-head tile), T * Hkv * QUERY_TILES of them.

With USE_PDL (programmatic dependent launch) the program waits for the previous grid
before its first load, the metadata's and the counter's included, so it may be launched
while that grid drains (`grid_dependency.wait_for_previous_grid`).
"""

import triton
import triton.language as tl

from det_suite.kernels.bi_attention_combine import combine_segments
from det_suite.kernels.bi_attention_segment import (attend_segment, attention_output,
                                                    request_of_row)
from det_suite.kernels.grid_dependency import wait_for_previous_grid


@triton.jit
def bi_paged_attention_split_kernel(
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
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr,
    SEGMENT: tl.constexpr,
    QUANTIZE_OUT: tl.constexpr, FP8_MAX: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)  # first: the metadata loads below read memory too
    QUERY_TILES: tl.constexpr = (GROUP + BLOCK_Q - 1) // BLOCK_Q
    row = tl.program_id(0)
    kv_head = tl.program_id(1) // QUERY_TILES
    query_tile = tl.program_id(1) % QUERY_TILES
    segment = tl.program_id(2)

    request = request_of_row(query_starts_ptr, row, num_requests)
    q_first = tl.load(query_starts_ptr + request)
    q_len = tl.load(query_starts_ptr + request + 1) - q_first
    context = tl.load(context_lens_ptr + request)
    kv_len = context + q_len
    position = context + row - q_first
    seg_start = segment * SEGMENT
    if seg_start > position:  # a segment past the row's keys: not part of its reduction
        return

    # The group's query heads in the tile's first rows, every one at the row's position.
    offs_q = tl.arange(0, BLOCK_Q)
    group_rank = query_tile * BLOCK_Q + offs_q      # the head's rank within its group
    row_is_query = group_rank < GROUP
    heads = kv_head * GROUP + group_rank
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + row.to(tl.int64) * stride_qt + heads[:, None] * stride_qh
                + offs_d[None, :], mask=row_is_query[:, None], other=0.0)
    positions = position + offs_q * 0
    block_table = block_tables_ptr + request.to(tl.int64) * stride_bt
    seg_max, seg_sum, seg_acc = attend_segment(
        q, positions, seg_start, tl.minimum(position + 1, seg_start + SEGMENT), kv_len, scale,
        k_cache_ptr, v_cache_ptr, block_table, kv_head, block_size,
        stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        BLOCK_Q, BLOCK_KV, HEAD_DIM, SEGMENT)

    out_rows = (out_ptr + row.to(tl.int64) * stride_ot + heads[:, None] * stride_oh
                + offs_d[None, :])
    live = position // SEGMENT + 1
    if live == 1:
        # The row's one segment is its whole reduction: the output a merge of it gives.
        out = attention_output(seg_acc, seg_sum, q_ptr.dtype.element_ty, out_scale_ptr,
                               QUANTIZE_OUT, FP8_MAX)
        tl.store(out_rows, out.to(out_ptr.dtype.element_ty), mask=row_is_query[:, None])
    else:
        stats_rows = seg_stats_ptr + row.to(tl.int64) * stride_st + heads * stride_sh
        acc_rows = (seg_acc_ptr + row.to(tl.int64) * stride_at + heads[:, None] * stride_ah
                    + offs_d[None, :])
        tl.store(stats_rows + segment * stride_ss, seg_max, mask=row_is_query)
        tl.store(stats_rows + segment * stride_ss + 1, seg_sum, mask=row_is_query)
        tl.store(acc_rows + segment * stride_as, seg_acc, mask=row_is_query[:, None])

        counter = counters_ptr + row.to(tl.int64) * tl.num_programs(1) + tl.program_id(1)
        # Every thread's workspace store must be issued before the release below publishes it.
        tl.debug_barrier()
        arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
        if arrived == live - 1:
            combine_segments(stats_rows, acc_rows, live, stride_ss, stride_as, row_is_query,
                             q_ptr.dtype.element_ty, out_rows, out_scale_ptr,
                             QUANTIZE_OUT, FP8_MAX)
            # Re-arm the counter for the next launch (and the next CUDA Graph replay).
            tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")
