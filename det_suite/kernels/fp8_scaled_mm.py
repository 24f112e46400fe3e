"""Static per-tensor FP8 scaled matrix multiply with a reduction schedule fixed by (N, K).

out[m, n] = cast( (sum_k a[m, k] * b[k, n]) * (a_scale * b_scale) + bias[n] )

The reduction schedule is the triple (partition of K into SPLIT_K chunks of K_CHUNK
elements, BLOCK_K tiles visited in ascending order inside a chunk, chunks added to an fp32
running total in ascending order). The caller derives all three from (N, K) only; BLOCK_M
and the grid may follow M. Three launch shapes realise the same schedule:

- WRITE_PARTIALS=False: one program walks every chunk of its tile, each chunk summed into a
  fresh accumulator and added to the total in order (no workspace; for large M).
- WRITE_PARTIALS=True: program (tile, s) writes chunk s's fp32 sum to a workspace (more
  CTAs; for small M); then either the last program of the tile to arrive adds the chunks
  in order (FUSED_FIXUP, one launch) or `fp8_splitk_reduce_kernel` does (a second launch).

All compute identical arithmetic, so the launch shape may depend on M.

PROMOTE_K (a constant of the GPU family, or None): every PROMOTE_K elements of K the MMA's
partial sum is added into the fp32 accumulator (Triton's `max_num_imprecise_acc`; it acts on
SM90 wgmma, where the MMA alone accumulates with fewer mantissa bits than fp32). It is part
of the reduction schedule, so it never follows M.
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_epilogue import segment_of, store_scaled_tile, store_split_partial
from det_suite.kernels.grid_dependency import wait_for_previous_grid
from det_suite.kernels.tile_order import grouped_tile_coordinates


@triton.jit
def _sum_k_chunk(a_ptr, b_ptr, offs_am, offs_bn, k_begin, K, K_CHUNK,
                 stride_ak, stride_bk,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 EVEN_K: tl.constexpr, PROMOTE_K: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] + (k_begin + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_begin + offs_k)[:, None] * stride_bk + offs_bn[None, :]
    k_end = tl.minimum(k_begin + K_CHUNK, K)
    for k0 in range(k_begin, k_end, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            # Zero-fill the K tail on both operands: a garbage product past K would be
            # summed into real outputs.
            k_in_range = (k0 + offs_k) < K
            a = tl.load(a_ptrs, mask=k_in_range[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_in_range[:, None], other=0.0)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=PROMOTE_K)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def fp8_scaled_mm_kernel(
    a_ptr, b_ptr, out_ptr, partials_ptr, counters_ptr, bias_ptr, a_scale_ptr, b_scale_ptr,
    M, N, K, K_CHUNK, SEG_END0, SEG_END1,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_ps, stride_pm, stride_pn,
    stride_om, stride_on,
    HAS_BIAS: tl.constexpr,
    SPLIT_K: tl.constexpr,
    WRITE_PARTIALS: tl.constexpr,
    FUSED_FIXUP: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    USE_PDL: tl.constexpr,
    PROMOTE_K: tl.constexpr,
    SEGMENTS: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    pid_m, pid_n = grouped_tile_coordinates(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Padding rows/columns wrap onto real ones so operand loads need no M/N mask; their
    # results are masked at the store and never read back.
    rows_am = offs_m % M
    if SEGMENTS > 1:
        # Segment s of N reads the s-th of the stacked (M, K) activations (segment ends are
        # multiples of BLOCK_N: one segment per tile).
        rows_am += segment_of(pid_n * BLOCK_N, SEG_END0, SEG_END1, SEGMENTS) * M
    offs_am = rows_am * stride_am
    offs_bn = (offs_n % N) * stride_bn
    if WRITE_PARTIALS:
        split = tl.program_id(1)
        acc = _sum_k_chunk(a_ptr, b_ptr, offs_am, offs_bn, split * K_CHUNK, K, K_CHUNK,
                           stride_ak, stride_bk, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PROMOTE_K)
        store_split_partial(acc, split, partials_ptr, stride_ps, stride_pm, stride_pn,
                            counters_ptr, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m,
                            offs_n, M, N, stride_om, stride_on, HAS_BIAS, SPLIT_K, FUSED_FIXUP,
                            BLOCK_M, BLOCK_N, SEG_END0, SEG_END1, SEGMENTS)
    else:
        if SPLIT_K == 1:
            total = _sum_k_chunk(a_ptr, b_ptr, offs_am, offs_bn, 0, K, K_CHUNK,
                                 stride_ak, stride_bk, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PROMOTE_K)
        else:
            # Same arithmetic as the workspace path: fresh accumulator per chunk, chunks
            # added to a zero-initialised total in ascending order.
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for split in range(SPLIT_K):
                total += _sum_k_chunk(a_ptr, b_ptr, offs_am, offs_bn, split * K_CHUNK, K,
                                      K_CHUNK, stride_ak, stride_bk,
                                      BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PROMOTE_K)
        store_scaled_tile(total, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n,
                          M, N, stride_om, stride_on, HAS_BIAS, SEG_END0, SEG_END1, SEGMENTS)
