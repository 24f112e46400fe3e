"""The fast stock arm's decode attention, first half (flash-decoding): one program per
(request, KV head, split) reduces one slice of the request's keys for every query head of
that KV head's GQA group into an fp32 workspace; `stock_decode_attention_combine.py` merges
the slices.

Not batch-invariant, on purpose: this is the control arm (`engine.fast_stock`). The number
of splits is chosen by the host from the batch (`engine.fast_stock.decode_splits`), and the
slice length from the request's context inside the kernel (ceil(keys / NUM_SPLITS), rounded
up to BLOCK_KV), so the grouping of a row's softmax sum moves with both, as it does in
flash-decoding and FlashInfer. Not in `kernels.registry` (whose kernels must keep the
invariance rule); launched by `engine.fast_stock` directly.

Layout: q (R, Hq, D), one query per request; k/v cache (pages, page_size, Hkv, D);
block_tables (R, W); context_lens (R,) keys before the query (its own key is at position
context, already written). Workspace: stats (R, Hq, NUM_SPLITS, 2) = (max, sum), acc
(R, Hq, NUM_SPLITS, D) unnormalised. A split past the request's keys writes nothing.
"""

import triton
import triton.language as tl


@triton.jit
def stock_decode_attention_split_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, context_lens_ptr,
    stats_ptr, acc_ptr,
    scale, block_size,
    stride_qr, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_bt,
    stride_sr, stride_sh, stride_ss,
    stride_ar, stride_ah, stride_as,
    GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_KV: tl.constexpr, NUM_SPLITS: tl.constexpr,
):
    request = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    keys = tl.load(context_lens_ptr + request) + 1
    split_len = tl.cdiv(tl.cdiv(keys, NUM_SPLITS), BLOCK_KV) * BLOCK_KV
    start = split * split_len
    if start >= keys:  # past the request's keys: the combine never reads this split
        return
    end = tl.minimum(start + split_len, keys)

    # The group's query heads are rows 0..GROUP-1 of the MMA tile; padding rows load zeros.
    offs_h = tl.arange(0, BLOCK_H)
    row_is_head = offs_h < GROUP
    head = kv_head * GROUP + offs_h
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + request.to(tl.int64) * stride_qr + head[:, None] * stride_qh
                + offs_d[None, :], mask=row_is_head[:, None], other=0.0)

    row_max = tl.full([BLOCK_H], float("-inf"), tl.float32)
    row_sum = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    block_table = block_tables_ptr + request.to(tl.int64) * stride_bt
    offs_n = tl.arange(0, BLOCK_KV)
    for tile in range(start, end, BLOCK_KV):
        pos = tile + offs_n
        key_exists = pos < end
        page = tl.load(block_table + pos // block_size, mask=key_exists, other=0).to(tl.int64)
        slot = pos % block_size
        k = tl.load(k_cache_ptr + page[:, None] * stride_kb + slot[:, None] * stride_ks
                    + kv_head * stride_kh + offs_d[None, :], mask=key_exists[:, None],
                    other=0.0)
        v = tl.load(v_cache_ptr + page[:, None] * stride_vb + slot[:, None] * stride_vs
                    + kv_head * stride_vh + offs_d[None, :], mask=key_exists[:, None],
                    other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(key_exists[None, :], s, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(s, 1))
        p = tl.exp(s - new_max[:, None])
        alpha = tl.exp(row_max - new_max)
        row_sum = row_sum * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        row_max = new_max

    stats = stats_ptr + request.to(tl.int64) * stride_sr + head * stride_sh + split * stride_ss
    tl.store(stats, row_max, mask=row_is_head)
    tl.store(stats + 1, row_sum, mask=row_is_head)
    tl.store(acc_ptr + request.to(tl.int64) * stride_ar + head[:, None] * stride_ah
             + split * stride_as + offs_d[None, :], acc, mask=row_is_head[:, None])
