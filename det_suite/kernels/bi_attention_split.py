"""Batch-invariant paged attention, split shape, first half: one program per (query row,
group of HEADS query heads that share a KV head, segment) reduces that segment of the row's
keys into an fp32 workspace; `bi_attention_combine.py` then merges the segments in
ascending order.

The op launches this shape for decode calls (one query per request), where the tile kernel
(`bi_attention.py`) would run one program per head and walk the whole context serially.
Each program computes exactly what the tile kernel computes for its heads' rows and that
segment (`bi_attention_segment.attend_segment`, the same BLOCK_Q-row MMA tile), so the
combine's result has the bits a prefill of the same query has: see `bi_attention.py` for
why those depend on nothing but the row's q and its K/V.

Why HEADS query heads in one tile: a decode row's query heads of one KV head (its GQA
group) all read that KV head's keys, at one position, so one mask. Put in rows 0..HEADS-1
of the MMA tile they read each K/V tile once instead of once per head, from GROUP-times
fewer programs (the H200 measured a Qwen3-8B decode call at 2048 keys 18.1 -> 13.0 us at
batch 1, 52.9 -> 19.2 us at batch 4: docs/decode-step-kernels.md). It cannot change a
head's bits: a row of `tl.dot`'s output depends on that row of its first operand only (what
makes any GEMM row-invariant, and what the tile kernel's own query rows already rely on),
and each row keeps its own max, sum and accumulator. HEADS is the largest divisor of GROUP
that fits BLOCK_Q (`ops.bi_launch_spec.attention_heads_per_program`): every head of a
program then shares its KV head.

The grid (T, Hq // HEADS, MAX_SEGMENTS) is static: MAX_SEGMENTS covers block_tables' width times the
page size, so no device-to-host copy sizes it and the launch can be captured in a CUDA
graph. A program whose segment starts past its row's position returns at once and writes
nothing; the combine reads only the segments up to the row's position.

Workspace, fp32, one entry per (row, head, segment): seg_stats (T, Hq, S, 2) holds the
segment's max and sum, seg_acc (T, Hq, S, HEAD_DIM) its unnormalised output.
"""

import triton
import triton.language as tl

from det_suite.kernels.bi_attention_segment import attend_segment, request_of_row


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
    GROUP: tl.constexpr, HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr,
    SEGMENT: tl.constexpr,
):
    tl.static_assert(HEADS <= BLOCK_Q)
    tl.static_assert(GROUP % HEADS == 0)  # a program's heads share one KV head
    row = tl.program_id(0)
    first_head = tl.program_id(1) * HEADS
    segment = tl.program_id(2)
    kv_head = first_head // GROUP

    request = request_of_row(query_starts_ptr, row, num_requests)
    q_first = tl.load(query_starts_ptr + request)
    q_len = tl.load(query_starts_ptr + request + 1) - q_first
    context = tl.load(context_lens_ptr + request)
    kv_len = context + q_len
    position = context + row - q_first
    seg_start = segment * SEGMENT
    if seg_start > position:  # a segment past the row's keys: not part of its reduction
        return

    # Head first_head + i in row i of the MMA tile; rows past HEADS load zeros and are
    # never stored.
    offs_q = tl.arange(0, BLOCK_Q)
    row_is_head = offs_q < HEADS
    head = first_head + offs_q
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + row.to(tl.int64) * stride_qt + head[:, None] * stride_qh
                + offs_d[None, :], mask=row_is_head[:, None], other=0.0)
    positions = position + offs_q * 0
    block_table = block_tables_ptr + request.to(tl.int64) * stride_bt
    seg_max, seg_sum, seg_acc = attend_segment(
        q, positions, seg_start, tl.minimum(position + 1, seg_start + SEGMENT), kv_len, scale,
        k_cache_ptr, v_cache_ptr, block_table, kv_head, block_size,
        stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        BLOCK_Q, BLOCK_KV, HEAD_DIM, SEGMENT)

    stats = seg_stats_ptr + row.to(tl.int64) * stride_st + head * stride_sh + segment * stride_ss
    tl.store(stats, seg_max, mask=row_is_head)
    tl.store(stats + 1, seg_sum, mask=row_is_head)
    acc_rows = (seg_acc_ptr + row.to(tl.int64) * stride_at + head[:, None] * stride_ah
                + segment * stride_as + offs_d[None, :])
    tl.store(acc_rows, seg_acc, mask=row_is_head[:, None])
