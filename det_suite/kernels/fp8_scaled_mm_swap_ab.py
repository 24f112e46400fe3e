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

Everything but the K loop is the unswapped TMA kernel's program (`fp8_tma_program.py`,
SWAP_AB=True): the accumulator is transposed back before the shared epilogue, so scaling,
bias, split-K partials and the fused fix-up are the other kernels' code.
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_tma_program import fp8_tma_program


# M is never specialised: Triton would compile M == 1 (every single-token decode step) as a
# separate constant-M kernel, which measured slower on the H200 than the general code.
@triton.jit(do_not_specialize=["M"])
def fp8_scaled_mm_swap_ab_kernel(
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
    PROMOTE_K: tl.constexpr,
    SEGMENTS: tl.constexpr,
    PREFETCH_K: tl.constexpr,
):
    fp8_tma_program(a_desc, b_desc, out_ptr, partials_ptr, counters_ptr, bias_ptr, a_scale_ptr,
                    b_scale_ptr, M, N, K, K_CHUNK, SEG_END0, SEG_END1, stride_ps, stride_pm, stride_pn, stride_om,
                    stride_on, b_ptr, stride_bn, HAS_BIAS, SPLIT_K, WRITE_PARTIALS, FUSED_FIXUP,
                    BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, USE_PDL, SWAP_AB=True,
                    PROMOTE_K=PROMOTE_K, SEGMENTS=SEGMENTS, PREFETCH_K=PREFETCH_K)
