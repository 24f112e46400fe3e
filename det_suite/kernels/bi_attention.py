"""Batch-invariant causal attention over a paged KV cache: prefill with a query offset,
chunked prefill and decode, one program per (query tile, head) walking its segments in
registers. Decode calls may instead take the split shape (`bi_attention_split.py`, then
`bi_attention_combine.py`), which computes the same bits with one program per segment.

Request r owns query rows query_starts[r]:query_starts[r+1]; its keys and values for
positions 0 .. context_lens[r] + q_len - 1 are already in the cache, position p in block
block_tables[r, p // block_size] at slot p % block_size. Query j of request r sits at
position context_lens[r] + j and attends positions 0 .. context_lens[r] + j. Query head h
reads KV head h // GROUP.

Why a query's bits depend only on its own q row and the K/V at its positions:

- The reduction is fixed by absolute positions alone (`bi_attention_segment.py`): keys are
  cut into SEGMENT-sized segments, each reduced from a fresh state in ascending BLOCK_KV
  tiles with an fp32 online softmax, and the segments merged in ascending order starting
  from segment 0's state. Neither the cuts nor the order depend on which queries share a
  program, on the chunk a prefill was split into, on the call, or on the launch shape.
- Why segments at all: a long context's segments are independent until the merge, so a
  decode step (one query per request: one program per head in this shape) can spread them
  over programs (the split shape) and still reduce exactly as a prefill does here.
- A program covers BLOCK_Q queries of one request and walks the keys up to its last
  query's position, so an earlier query of the tile may see trailing tiles, or whole
  trailing segments, wholly hidden from it. Such a tile leaves its row unchanged bit for
  bit: its scores are -inf, the running max does not move (rescale factor exp(0) = 1
  exactly), its probabilities are 0, and it adds exact zeros to the sum and the
  accumulator. Such a segment keeps a fresh state (max -inf), which the merge selects away.
- BLOCK_Q is the same for every launch of either shape, so every call uses one MMA
  instruction, whose arithmetic for a row does not read the other rows.
- Keys past the request's cached length are never read (masked to zero), so whatever the
  cache holds there (stale pages, another request's data) cannot reach a row.

With QUANTIZE_OUT the output is the o projection's FP8 input instead: the rows rounded to
q's dtype, then quantized with the scale at out_scale_ptr (`attention_output`), stored to a
float8_e4m3fn out, byte for byte `quantize_fp8` of the unquantized output.

Programs are laid out over query tiles of all requests: request r's tiles start at program
query_starts[r] // BLOCK_Q + r, which leaves room for ceil(q_len / BLOCK_Q) tiles; the few
programs past a request's last tile store nothing. The grid (T // BLOCK_Q + R, Hq) needs
no device-to-host copy, so the launch can be captured in a CUDA graph.
"""

import triton
import triton.language as tl

from det_suite.kernels.bi_attention_segment import (attend_segment, attention_output,
                                                    merge_segment)


@triton.jit
def bi_paged_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr,
    block_tables_ptr, context_lens_ptr, query_starts_ptr,
    scale,
    num_requests, block_size,
    stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_bt,
    out_ptr, out_scale_ptr,
    stride_ot, stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr,
    SEGMENT: tl.constexpr,
    QUANTIZE_OUT: tl.constexpr, FP8_MAX: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // GROUP

    # The request this program's tile belongs to: the last one whose tiles start at or
    # before it.
    request = tl.program_id(0) * 0
    for r in range(1, num_requests):
        first_tile_of_r = tl.load(query_starts_ptr + r) // BLOCK_Q + r
        request += (first_tile_of_r <= tile).to(tl.int32)
    q_first = tl.load(query_starts_ptr + request)
    q_len = tl.load(query_starts_ptr + request + 1) - q_first
    context = tl.load(context_lens_ptr + request)
    kv_len = context + q_len
    tile_start = (tile - (q_first // BLOCK_Q + request)) * BLOCK_Q

    offs_q = tile_start + tl.arange(0, BLOCK_Q)      # query index within the request
    query_exists = offs_q < q_len
    positions = context + offs_q
    offs_d = tl.arange(0, HEAD_DIM)
    q_rows = (q_first + offs_q).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=query_exists[:, None], other=0.0)

    # Keys up to the tile's last query; none for a program past the request's last tile.
    kv_end = tl.where(tile_start < q_len, tl.minimum(context + tile_start + BLOCK_Q, kv_len), 0)
    block_table = block_tables_ptr + request.to(tl.int64) * stride_bt
    row_max, row_sum, acc = attend_segment(
        q, positions, 0, tl.minimum(kv_end, SEGMENT), kv_len, scale,
        k_cache_ptr, v_cache_ptr, block_table, kv_head, block_size,
        stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        BLOCK_Q, BLOCK_KV, HEAD_DIM, SEGMENT)
    for seg_start in range(SEGMENT, kv_end, SEGMENT):
        seg_max, seg_sum, seg_acc = attend_segment(
            q, positions, seg_start, tl.minimum(kv_end, seg_start + SEGMENT), kv_len, scale,
            k_cache_ptr, v_cache_ptr, block_table, kv_head, block_size,
            stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
            BLOCK_Q, BLOCK_KV, HEAD_DIM, SEGMENT)
        row_max, row_sum, acc = merge_segment(row_max, row_sum, acc, seg_max, seg_sum, seg_acc)

    # Rows past the request's queries are never stored; a sum of 1 keeps them finite.
    out = attention_output(acc, tl.where(query_exists, row_sum, 1.0), q_ptr.dtype.element_ty,
                           out_scale_ptr, QUANTIZE_OUT, FP8_MAX)
    tl.store(out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=query_exists[:, None])
