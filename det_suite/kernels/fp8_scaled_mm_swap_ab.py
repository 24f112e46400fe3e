"""The FP8 scaled-MM of `fp8_scaled_mm_tma.py` with the MMA operands swapped, for few rows.

Hopper's wgmma needs 64 rows on its A side. With the activation there, a decode step of
one to sixteen tokens fills 48-63 of those rows with TMA zero-fill on every K step, and
that dead traffic, not the weight, bounds the kernel. Swapped, a program computes the
transposed tile out[m, n]^T = weight[n, :] . act[m, :]^T: BLOCK_N weight rows on the
64-row side and BLOCK_M (>= 16) tokens on wgmma's narrow N side, so every byte a K step
loads is a weight byte or a live token.

Same reduction schedule, same arithmetic: each output element is still the sum over
k32 MMA steps in ascending K order of the same exact FP8 products, inside the same
K_CHUNK chunks added in ascending order to a zero-initialised fp32 total; only which
operand sits on which side of the instruction changes. That this gives the unswapped
kernels' bits is an empirical claim about the MMA unit, so the invariance suite checks it
on every GPU (swapped tiles serve small M, unswapped ones the rest, and any difference
between them is an M-dependent result).

The transposed accumulator goes through the shared epilogue, so scaling, bias, split-K
partials and the fused fix-up are the other kernels' code.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from det_suite.kernels.fp8_epilogue import finish_split_k_tile, store_scaled_tile
from det_suite.kernels.tile_order import grouped_tile_coordinates


@triton.jit
def _sum_k_chunk_swapped(a_desc, b_desc, off_m, off_n, k_begin, K, K_CHUNK,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    k_end = tl.minimum(k_begin + K_CHUNK, K)
    for k0 in range(k_begin, k_end, BLOCK_K):
        weight = b_desc.load([off_n, k0])
        act = a_desc.load([off_m, k0])
        acc_t = tl.dot(weight, act.T, acc_t)
    return tl.trans(acc_t)


# M is never specialised: Triton would compile M == 1 (every single-token decode step) as a
# separate constant-M kernel, which measured slower on the H200 than the general code.
@triton.jit(do_not_specialize=["M"])
def fp8_scaled_mm_swap_ab_kernel(
    a_desc, b_desc, out_ptr, partials_ptr, counters_ptr, bias_ptr, a_scale_ptr, b_scale_ptr,
    M, N, K, K_CHUNK,
    stride_ps, stride_pm, stride_pn,
    stride_om, stride_on,
    HAS_BIAS: tl.constexpr,
    SPLIT_K: tl.constexpr,
    WRITE_PARTIALS: tl.constexpr,
    FUSED_FIXUP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if USE_PDL:
        # As in fp8_scaled_mm_tma_kernel: nothing is read or written before the wait.
        gdc_wait()
        gdc_launch_dependents()
    pid_m, pid_n = grouped_tile_coordinates(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    if WRITE_PARTIALS:
        split = tl.program_id(1)
        acc = _sum_k_chunk_swapped(a_desc, b_desc, off_m, off_n, split * K_CHUNK, K, K_CHUNK,
                                   BLOCK_M, BLOCK_N, BLOCK_K)
        partial_ptrs = partials_ptr + offs_m[:, None] * stride_pm + offs_n[None, :] * stride_pn
        tl.store(partial_ptrs + split * stride_ps, acc,
                 mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])
        if FUSED_FIXUP:
            finish_split_k_tile(partial_ptrs, stride_ps, counters_ptr + tl.program_id(0), out_ptr,
                                bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N,
                                stride_om, stride_on, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N)
    else:
        if SPLIT_K == 1:
            total = _sum_k_chunk_swapped(a_desc, b_desc, off_m, off_n, 0, K, K_CHUNK,
                                         BLOCK_M, BLOCK_N, BLOCK_K)
        else:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for split in range(SPLIT_K):
                total += _sum_k_chunk_swapped(a_desc, b_desc, off_m, off_n, split * K_CHUNK,
                                              K, K_CHUNK, BLOCK_M, BLOCK_N, BLOCK_K)
        store_scaled_tile(total, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n,
                          M, N, stride_om, stride_on, HAS_BIAS)
