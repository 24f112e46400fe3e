"""The one epilogue every FP8 GEMM path uses: scale, then bias, in fp32, then cast.

Shared by the single-pass kernels and the split-K reduction so all round identically; the
kernels launch with `enable_fp_fusion=False` so `acc * scale + bias` is two roundings
(never an FMA in one kernel and a mul+add in another).

Segmented GEMMs (SEGMENTS > 1: N cut into up to three column segments, each with its own
activation and scales, e.g. a layer's q/k/v) scale each column by its segment's
a_scale[s] * b_scale[s]: the same fp32 product a separate GEMM of that segment forms.
"""

import triton
import triton.language as tl


@triton.jit
def scale_and_bias(acc, scale, bias, HAS_BIAS: tl.constexpr):
    out = acc * scale
    if HAS_BIAS:
        out = out + bias
    return out


@triton.jit
def segment_of(n, SEG_END0, SEG_END1, SEGMENTS: tl.constexpr):
    """Which of the SEGMENTS column segments column (or column vector) n lies in; segment s
    ends (exclusive) at SEG_END<s>, the last one at N."""
    seg = (n >= SEG_END0).to(tl.int32)
    if SEGMENTS > 2:
        seg += (n >= SEG_END1).to(tl.int32)
    return seg


@triton.jit
def store_scaled_tile(total, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N,
                      stride_om, stride_on, HAS_BIAS: tl.constexpr,
                      SEG_END0, SEG_END1, SEGMENTS: tl.constexpr):
    row_in_range = offs_m < M
    col_in_range = offs_n < N
    if SEGMENTS == 1:
        scale = tl.load(a_scale_ptr) * tl.load(b_scale_ptr)
    else:
        seg = segment_of(offs_n, SEG_END0, SEG_END1, SEGMENTS)
        scale = (tl.load(a_scale_ptr + seg) * tl.load(b_scale_ptr + seg))[None, :]
    bias = tl.zeros((offs_n.shape[0],), dtype=tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=col_in_range, other=0.0).to(tl.float32)
    out = scale_and_bias(total, scale, bias[None, :], HAS_BIAS)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
             out.to(out_ptr.dtype.element_ty),
             mask=row_in_range[:, None] & col_in_range[None, :])


@triton.jit
def store_split_partial(acc, split, partials_ptr, stride_ps, stride_pm, stride_pn, counters_ptr,
                        out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N,
                        stride_om, stride_on, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr,
                        FUSED_FIXUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        SEG_END0, SEG_END1, SEGMENTS: tl.constexpr):
    """Store split `split`'s fp32 partial tile into the workspace; with FUSED_FIXUP the last
    split of the tile to arrive also finishes it (otherwise a reduce kernel does)."""
    partial_ptrs = partials_ptr + offs_m[:, None] * stride_pm + offs_n[None, :] * stride_pn
    tl.store(partial_ptrs + split * stride_ps, acc,
             mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])
    if FUSED_FIXUP:
        finish_split_k_tile(partial_ptrs, stride_ps, counters_ptr + tl.program_id(0), out_ptr,
                            bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N,
                            stride_om, stride_on, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N,
                            SEG_END0, SEG_END1, SEGMENTS)


@triton.jit
def finish_split_k_tile(partial_ptrs, stride_os, counter_ptr, out_ptr, bias_ptr, a_scale_ptr,
                        b_scale_ptr, offs_m, offs_n, M, N, stride_om, stride_on,
                        HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        SEG_END0, SEG_END1, SEGMENTS: tl.constexpr):
    """Called by each split program after it stored its partial tile. The last of the
    tile's SPLIT_K programs to arrive adds all partials in ascending split order - the same
    sum as `fp8_splitk_reduce_kernel` and the single-pass kernel - so which program arrives
    last never changes the bits, and no second launch is needed."""
    # Every thread's partial store must be issued before the release below publishes it.
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        in_bounds = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for split in range(SPLIT_K):
            # .cg reads L2, never a stale L1 line of another SM's partial.
            total += tl.load(partial_ptrs + split * stride_os, mask=in_bounds, other=0.0,
                             cache_modifier=".cg")
        store_scaled_tile(total, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n,
                          M, N, stride_om, stride_on, HAS_BIAS, SEG_END0, SEG_END1, SEGMENTS)
        # Re-arm the counter for the next launch (and the next CUDA Graph replay).
        tl.atomic_xchg(counter_ptr, 0, sem="relaxed", scope="gpu")
