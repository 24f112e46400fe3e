"""The FP8 scaled-MM of `fp8_scaled_mm.py`, with operands fetched by TMA descriptors.

Same reduction schedule, same arithmetic: K split into SPLIT_K chunks of K_CHUNK elements,
BLOCK_K tiles in ascending order inside a chunk, each chunk summed into a fresh accumulator
and added to a zero-initialised fp32 total in ascending order. Only the loads differ: the
tensor-memory accelerator copies whole tiles and fills out-of-range elements (rows past M,
columns past N, the K tail) with zeros, so no masks are needed. Both kernels must give the
same bits; the test suite compares them.

Needs 16-byte aligned row strides (K % 16 == 0 for FP8 operands); callers fall back to the
pointer kernel otherwise, a choice that depends on K alone. The program body is shared with
the swapped-operand kernel (`fp8_tma_program.py`).
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_tma_program import fp8_tma_program


@triton.jit
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
    PROMOTE_K: tl.constexpr,
    SEGMENTS: tl.constexpr,
    PREFETCH_K: tl.constexpr,
):
    fp8_tma_program(a_desc, b_desc, out_ptr, partials_ptr, counters_ptr, bias_ptr, a_scale_ptr,
                    b_scale_ptr, M, N, K, K_CHUNK, SEG_END0, SEG_END1, stride_ps, stride_pm, stride_pn, stride_om,
                    stride_on, b_ptr, stride_bn, HAS_BIAS, SPLIT_K, WRITE_PARTIALS, FUSED_FIXUP,
                    BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, USE_PDL, SWAP_AB=False,
                    PROMOTE_K=PROMOTE_K, SEGMENTS=SEGMENTS, PREFETCH_K=PREFETCH_K)
