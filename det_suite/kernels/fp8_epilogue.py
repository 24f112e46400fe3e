"""The one epilogue every FP8 GEMM path uses: scale, then bias, in fp32.

Shared by the single-pass kernel and the split-K reduction so both round identically;
the kernels launch with `enable_fp_fusion=False` so `acc * scale + bias` is two roundings
(never an FMA in one kernel and a mul+add in the other).
"""

import triton
import triton.language as tl


@triton.jit
def scale_and_bias(acc, scale, bias, HAS_BIAS: tl.constexpr):
    out = acc * scale
    if HAS_BIAS:
        out = out + bias
    return out
