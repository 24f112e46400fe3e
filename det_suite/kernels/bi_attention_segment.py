"""The canonical reduction of batch-invariant paged attention, shared by its two launch
shapes: `bi_attention.py` (one program per query tile walks the segments in registers) and
`bi_attention_split.py` + `bi_attention_combine.py` (one program per segment, then an
ordered merge).

A query's keys are cut into SEGMENT-sized segments of absolute positions (0, SEGMENT,
2*SEGMENT, ...). `attend_segment` reduces one segment: BLOCK_KV tiles in ascending order,
an fp32 online softmax from a fresh state (max -inf, sum 0, acc 0). `merge_segment` folds a
segment's state into the running one; segments are merged in ascending order, starting
from segment 0's state. Both shapes call these two functions, and they spell their
multiply-adds (the running sum, the merge) as `tl.fma`, so the compiler cannot contract them
differently in the two kernels: a query's bits are the same whichever shape computed it.

`attention_output` is both shapes' epilogue: acc / sum rounded to the activation dtype,
the op's output, and with QUANTIZE_OUT that value quantized for the o projection by
`fp8_quantize`'s one definition, so either shape returns `quantize_fp8` of its own output.

Why segments of absolute positions, of one fixed size: a reduction split by the call (by
the context length, or by how many programs a GPU has) would give a decode step other bits
than the same query in a prefill. Cut at fixed positions, the split is part of the
canonical order itself, so a decode may spread its segments over programs and a prefill
walk them in one, with the same result. SEGMENT (256 keys, 4 BLOCK_KV tiles) keeps the
merge rare in a prefill and still gives a 2048-token decode 8 programs per head.
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_quantize import quantize_to_e4m3_grid


@triton.jit
def attend_segment(
    q, positions, seg_start, seg_end, kv_len, scale,
    k_cache_ptr, v_cache_ptr, block_table, kv_head, block_size,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, HEAD_DIM: tl.constexpr,
    SEGMENT: tl.constexpr,
):
    """(max, sum, acc) of rows `q` (BLOCK_Q, HEAD_DIM) at `positions` over the keys
    seg_start .. seg_end - 1 of one segment (seg_start a multiple of SEGMENT); keys at or
    past kv_len are never read."""
    # Tiles must not straddle segments, or a segment's tiles would depend on its neighbour.
    tl.static_assert(SEGMENT % BLOCK_KV == 0)
    offs_d = tl.arange(0, HEAD_DIM)
    row_max = tl.full((BLOCK_Q,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_Q, HEAD_DIM), dtype=tl.float32)
    for kv_start in range(seg_start, seg_end, BLOCK_KV):
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
        # A row that has seen no key of this segment yet (its position is before the
        # tile) keeps max -inf: it subtracts 0 instead, so its rescale and probabilities
        # are exact zeros rather than NaN (-inf - -inf), and its state stays fresh.
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        rescale = tl.exp(row_max - shift)
        probs = tl.exp(scores - shift[:, None])
        row_sum = tl.fma(row_sum, rescale, tl.sum(probs, axis=1))
        v_slot = block.to(tl.int64) * stride_vb + (offs_kv % block_size) * stride_vs
        v = tl.load(v_cache_ptr + v_slot[:, None] + kv_head * stride_vh + offs_d[None, :],
                    mask=key_in_cache[:, None], other=0.0)
        acc = tl.dot(probs.to(v.dtype), v, acc * rescale[:, None])
        row_max = new_max
    return row_max, row_sum, acc


@triton.jit
def merge_segment(row_max, row_sum, acc, seg_max, seg_sum, seg_acc):
    """The running (max, sum, acc) of rows after one more segment's state: rows (N,), acc
    (N, HEAD_DIM). The running max is finite (segment 0 holds key 0, which every query
    sees); a segment a row sees no key of (max -inf) leaves that row's state bit for bit."""
    seg_empty = seg_max == float("-inf")
    new_max = tl.maximum(row_max, seg_max)
    keep = tl.where(seg_empty, 1.0, tl.exp(row_max - new_max))
    take = tl.where(seg_empty, 0.0, tl.exp(seg_max - new_max))
    new_sum = tl.fma(row_sum, keep, seg_sum * take)
    new_acc = tl.fma(acc, keep[:, None], seg_acc * take[:, None])
    # Selected, not computed: acc * 1 + 0 would turn a -0.0 into +0.0.
    return (new_max, tl.where(seg_empty, row_sum, new_sum),
            tl.where(seg_empty[:, None], acc, new_acc))


@triton.jit
def attention_output(acc, row_sum, act_dtype: tl.constexpr, out_scale_ptr,
                     QUANTIZE_OUT: tl.constexpr, FP8_MAX: tl.constexpr):
    """Rows acc (N, HEAD_DIM) / row_sum (N,) in act_dtype (q's), or with QUANTIZE_OUT those
    values quantized with the scale at out_scale_ptr: e4m3 grid points in fp32, which the
    store's cast to float8_e4m3fn leaves exact."""
    out = (acc / row_sum[:, None]).to(act_dtype)
    if QUANTIZE_OUT:
        # Rounded to act_dtype first: the o projection quantizes the output as stored.
        out = quantize_to_e4m3_grid(out, tl.load(out_scale_ptr), FP8_MAX)
    return out


@triton.jit
def request_of_row(query_starts_ptr, row, num_requests):
    """The request that owns query row `row` (request r owns rows query_starts[r] ..
    query_starts[r+1] - 1). In a decode call (one query per request) request `row` owns
    it: two loads. Otherwise (any T == R call may reach the split shape) the last request
    whose rows start at or before it, counted as the tile kernel finds its tile's request."""
    row_is_a_request = row < num_requests
    first = tl.load(query_starts_ptr + row, mask=row_is_a_request, other=0)
    stop = tl.load(query_starts_ptr + row + 1, mask=row_is_a_request, other=0)
    request = row
    if (first > row) | (row >= stop):
        request = row * 0
        for r in range(1, num_requests):
            request += (tl.load(query_starts_ptr + r) <= row).to(tl.int32)
    return request
