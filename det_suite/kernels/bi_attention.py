"""Batch-invariant causal attention over a paged KV cache: prefill with a query offset,
chunked prefill and decode in one kernel.

Request r owns query rows query_starts[r]:query_starts[r+1]; its keys and values for
positions 0 .. context_lens[r] + q_len - 1 are already in the cache, position p in block
block_tables[r, p // block_size] at slot p % block_size. Query j of request r sits at
position context_lens[r] + j and attends positions 0 .. context_lens[r] + j. Query head h
reads KV head h // GROUP.

Why a query's bits depend only on its own q row and the K/V at its positions:

- KV is visited in fixed BLOCK_KV tiles of absolute positions (0, BLOCK_KV, 2*BLOCK_KV,
  ...), in ascending order, with an fp32 online softmax. Tile boundaries never depend on
  which queries share a program, on the chunk a prefill was split into, or on the call.
- A program covers BLOCK_Q queries of one request and walks the tiles up to its last
  query's position, so an earlier query of the tile may see trailing tiles wholly hidden
  from it. Such a tile leaves its row unchanged bit for bit: its scores are -inf, the
  running max does not move (rescale factor exp(0) = 1 exactly), its probabilities are 0,
  and it adds exact zeros to the sum and the accumulator.
- BLOCK_Q is the same for every launch, so every call uses one MMA instruction, whose
  arithmetic for a row does not read the other rows.
- Keys past the request's cached length are never read (masked to zero), so whatever the
  cache holds there (stale pages, another request's data) cannot reach a row.

Programs are laid out over query tiles of all requests: request r's tiles start at program
query_starts[r] // BLOCK_Q + r, which leaves room for ceil(q_len / BLOCK_Q) tiles; the few
programs past a request's last tile store nothing. The grid (T // BLOCK_Q + R, Hq) needs
no device-to-host copy, so the launch can be captured in a CUDA graph.
"""

import triton
import triton.language as tl


@triton.jit
def bi_paged_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr,
    block_tables_ptr, context_lens_ptr, query_starts_ptr,
    scale,
    num_requests, block_size,
    stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_ot, stride_oh,
    stride_bt,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr,
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

    row_max = tl.full((BLOCK_Q,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_Q, HEAD_DIM), dtype=tl.float32)
    # Keys up to the tile's last query; none for a program past the request's last tile.
    kv_end = tl.where(tile_start < q_len, tl.minimum(context + tile_start + BLOCK_Q, kv_len), 0)
    block_table = block_tables_ptr + request.to(tl.int64) * stride_bt
    for kv_start in range(0, kv_end, BLOCK_KV):
        offs_kv = kv_start + tl.arange(0, BLOCK_KV)
        key_in_cache = offs_kv < kv_len
        block = tl.load(block_table + offs_kv // block_size, mask=key_in_cache, other=0)
        slot = block.to(tl.int64) * stride_kb + (offs_kv % block_size) * stride_ks
        k = tl.load(k_cache_ptr + slot[None, :] + kv_head * stride_kh + offs_d[:, None],
                    mask=key_in_cache[None, :], other=0.0)
        scores = tl.dot(q, k) * scale
        key_visible = key_in_cache[None, :] & (offs_kv[None, :] <= positions[:, None])
        scores = tl.where(key_visible, scores, float("-inf"))

        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        rescale = tl.exp(row_max - new_max)
        probs = tl.exp(scores - new_max[:, None])
        row_sum = row_sum * rescale + tl.sum(probs, axis=1)
        v_slot = block.to(tl.int64) * stride_vb + (offs_kv % block_size) * stride_vs
        v = tl.load(v_cache_ptr + v_slot[:, None] + kv_head * stride_vh + offs_d[None, :],
                    mask=key_in_cache[:, None], other=0.0)
        acc = tl.dot(probs.to(v.dtype), v, acc * rescale[:, None])
        row_max = new_max

    # Rows past the request's queries are never stored; a sum of 1 keeps them finite.
    out = acc / tl.where(query_exists, row_sum, 1.0)[:, None]
    tl.store(out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=query_exists[:, None])
