"""Ordered reduction of split-K partial sums, then the FP8 GEMM epilogue.

Chunks are added to a zero-initialised fp32 total in ascending split order, exactly as the
single-pass kernel does, so both launch shapes give the same bits. No atomics: the order of
the sum is fixed by the loop, not by which CTA finished first.
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_epilogue import store_scaled_tile


@triton.jit
def fp8_splitk_reduce_kernel(
    partials_ptr, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr,
    M, N, SEG_END0, SEG_END1,
    stride_ps, stride_pm, stride_pn,
    stride_om, stride_on,
    HAS_BIAS: tl.constexpr,
    SPLIT_K: tl.constexpr,
    SEGMENTS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_in_range = offs_m < M
    col_in_range = offs_n < N
    in_bounds = row_in_range[:, None] & col_in_range[None, :]

    partial_ptrs = partials_ptr + offs_m[:, None] * stride_pm + offs_n[None, :] * stride_pn
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for split in range(SPLIT_K):
        total += tl.load(partial_ptrs + split * stride_ps, mask=in_bounds, other=0.0)

    store_scaled_tile(total, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N,
                      stride_om, stride_on, HAS_BIAS, SEG_END0, SEG_END1, SEGMENTS)
