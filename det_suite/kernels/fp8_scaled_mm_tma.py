"""The FP8 scaled-MM of `fp8_scaled_mm.py`, with operands fetched by TMA descriptors, and
(SWAP_AB) with the MMA operands swapped for few rows.

Same reduction schedule, same arithmetic: K split into SPLIT_K chunks of K_CHUNK elements,
BLOCK_K tiles in ascending order inside a chunk, each chunk summed into a fresh accumulator
and added to a zero-initialised fp32 total in ascending order (or written to the workspace
for the fix-up to add in that order). Only the loads differ: the tensor-memory accelerator
copies whole tiles and fills out-of-range elements (rows past M, columns past N, the K tail)
with zeros, so no masks are needed. Both kernels must give the same bits; the test suite
compares them. Needs 16-byte aligned row strides (K % 16 == 0 for FP8 operands); callers
fall back to the pointer kernel otherwise, a choice that depends on K alone.

SWAP_AB: Hopper's wgmma needs 64 rows on its A side. With the activation there, a decode
step of one to sixteen tokens fills 48-63 of those rows with TMA zero-fill on every K step,
and that dead traffic, not the weight, bounds the kernel. Swapped, a program computes the
transposed tile out[m, n]^T = weight[n, :] . act[m, :]^T: BLOCK_N weight rows on the 64-row
side and BLOCK_M (>= 16) tokens on wgmma's narrow N side, so every byte a K step loads is a
weight byte or a live token. Each output element is still the sum over k32 MMA steps in
ascending K order of the same exact FP8 products; only which operand sits on which side of
the instruction changes. That this gives the unswapped bits is an empirical claim about the
MMA unit, so the invariance suite checks it on every GPU (swapped tiles serve small M,
unswapped ones the rest). The accumulator is transposed back before the epilogue, so
scaling, bias, split-K partials and the fused fix-up are one code path.

SEGMENTS > 1 (a segmented GEMM, `ops.linear.fp8_scaled_mm_segmented`): the activation
descriptor holds SEGMENTS stacked (M, K) activations and column segment s reads the s-th;
segment ends are multiples of BLOCK_N, so a tile lies in one segment and its K loop is the
unsegmented one on that activation's rows.

PREFETCH_K > 0 (a PDL tile's `prefetch_k`): before waiting for the previous grid, the program
asks L2 for the first PREFETCH_K elements of its weight rows' K range (`l2_prefetch.py`).
The tile coordinates it needs are arithmetic on the launch's scalars, so nothing is read
before the wait.
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_epilogue import segment_of, store_scaled_tile, store_split_partial
from det_suite.kernels.grid_dependency import wait_for_previous_grid
from det_suite.kernels.l2_prefetch import prefetch_rows_to_l2
from det_suite.kernels.tile_order import grouped_tile_coordinates


@triton.jit
def _sum_k_chunk(a_desc, b_desc, off_m, off_n, k_begin, K, K_CHUNK,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 SWAP_AB: tl.constexpr, PROMOTE_K: tl.constexpr):
    k_end = tl.minimum(k_begin + K_CHUNK, K)
    if SWAP_AB:
        # The weight tile on the 64-row side, the tokens on the narrow side; transposed
        # back so the caller sees the same [BLOCK_M, BLOCK_N] tile either way.
        acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        for k0 in range(k_begin, k_end, BLOCK_K):
            weight = b_desc.load([off_n, k0])
            act = a_desc.load([off_m, k0])
            acc_t = tl.dot(weight, act.T, acc_t, max_num_imprecise_acc=PROMOTE_K)
        acc = tl.trans(acc_t)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(k_begin, k_end, BLOCK_K):
            a = a_desc.load([off_m, k0])
            b = b_desc.load([off_n, k0])
            acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=PROMOTE_K)
    return acc


# M is never specialised: Triton would compile M == 1 (every single-token decode step) as a
# separate constant-M kernel, which measured slower on the H200 than the general code (a
# swapped tile, what every shipped SM90 table and rule runs at M == 1). For unswapped tiles
# the lint found M's divisibility hint changes no PTX, so one kernel serves both.
@triton.jit(do_not_specialize=["M"])
def fp8_scaled_mm_tma_kernel(
    a_desc, b_desc, out_ptr, partials_ptr, counters_ptr, bias_ptr, a_scale_ptr, b_scale_ptr,
    M, N, K, K_CHUNK, SEG_END0, SEG_END1,
    stride_ps, stride_pm, stride_pn,
    stride_om, stride_on,
    b_ptr, stride_bn,
    HAS_BIAS: tl.constexpr,
    SPLIT_K: tl.constexpr,
    WRITE_PARTIALS: tl.constexpr,
    FUSED_FIXUP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    USE_PDL: tl.constexpr,
    SWAP_AB: tl.constexpr,
    PROMOTE_K: tl.constexpr,
    SEGMENTS: tl.constexpr,
    PREFETCH_K: tl.constexpr,
):
    pid_m, pid_n = grouped_tile_coordinates(M, N, BLOCK_M, BLOCK_N, GROUP_M)  # no memory read
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    if PREFETCH_K > 0:
        # The weight rows of this tile's K range into L2 while the previous grid may still
        # run (l2_prefetch.py): b_ptr is the weight the descriptor reads, (N, K), unit K stride.
        k_first = 0
        k_stop = K
        if WRITE_PARTIALS:
            k_first = tl.program_id(1) * K_CHUNK
            k_stop = tl.minimum(k_first + K_CHUNK, K)
        prefetch_rows_to_l2(b_ptr, stride_bn, off_n, N, k_first, k_stop, BLOCK_N, PREFETCH_K)
    wait_for_previous_grid(USE_PDL)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    # The activation rows this tile reads: its segment's block of the stacked activations.
    # Padding rows past M may read the next segment's rows; their outputs are never stored.
    off_am = off_m
    if SEGMENTS > 1:
        off_am += segment_of(off_n, SEG_END0, SEG_END1, SEGMENTS) * M
    if WRITE_PARTIALS:
        split = tl.program_id(1)
        acc = _sum_k_chunk(a_desc, b_desc, off_am, off_n, split * K_CHUNK, K, K_CHUNK,
                           BLOCK_M, BLOCK_N, BLOCK_K, SWAP_AB, PROMOTE_K)
        store_split_partial(acc, split, partials_ptr, stride_ps, stride_pm, stride_pn,
                            counters_ptr, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m,
                            offs_n, M, N, stride_om, stride_on, HAS_BIAS, SPLIT_K, FUSED_FIXUP,
                            BLOCK_M, BLOCK_N, SEG_END0, SEG_END1, SEGMENTS)
    else:
        if SPLIT_K == 1:
            total = _sum_k_chunk(a_desc, b_desc, off_am, off_n, 0, K, K_CHUNK,
                                 BLOCK_M, BLOCK_N, BLOCK_K, SWAP_AB, PROMOTE_K)
        else:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for split in range(SPLIT_K):
                total += _sum_k_chunk(a_desc, b_desc, off_am, off_n, split * K_CHUNK, K,
                                      K_CHUNK, BLOCK_M, BLOCK_N, BLOCK_K, SWAP_AB, PROMOTE_K)
        store_scaled_tile(total, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n,
                          M, N, stride_om, stride_on, HAS_BIAS, SEG_END0, SEG_END1, SEGMENTS)
