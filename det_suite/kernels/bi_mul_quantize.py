"""The gated MLP's product, quantized for the down projection in the same pass:

    q = fp8(clamp(round(a * b) / input_scale, -448, 448))

where round(a * b) is torch's `a * b` on two BF16/FP16 tensors (the product in fp32, one
rounding to the tensor dtype) and the quantization is `fp8_quantize`'s, byte for byte. So the
result is exactly `quantize_fp8(a * b, input_scale)`, in one launch instead of two.

With SILU_A, a is first replaced by torch's `F.silu(a)`, so the result is
`quantize_fp8(F.silu(a) * b, input_scale)`: the whole of the MLP between its two GEMMs.
torch's CUDA silu computes, for a BF16/FP16 x, x / (1 + expf(-x)) in fp32 with CUDA's
accurate expf and an IEEE division (PyTorch is built without fast-math), rounded to the
dtype. Here the same: libdevice's exp (the function nvcc's expf is; `tl.exp` is the fast
ex2 approximation), `div_rn` (the fp32 `/` is approximate), the same rounding.

Elementwise: every element depends on its own two inputs only, so batch-invariant by
construction. The product of two 8- or 11-bit significands is exact in fp32, so its one
rounding to the dtype is the only one, as in torch.

With USE_PDL (programmatic dependent launch, SM90+) every program waits for the previous
grid before it touches memory (`grid_dependency.wait_for_previous_grid`), so the launch
may start while that grid drains; the arithmetic is the same either way.
"""

import triton
import triton.language as tl
from triton.language.extra import libdevice

from det_suite.kernels.fp8_quantize import _widen_to_fp32, quantize_to_e4m3_grid
from det_suite.kernels.grid_dependency import wait_for_previous_grid


@triton.jit
def _silu(x):
    # expf ends by scaling by a power of two, exact, so a compiler contracting that multiply
    # with the `1 +` into one fma (nvcc's default, and Triton's) changes no bit. NaN stays
    # NaN; exp(-x) overflowing to inf makes silu -0.0, and silu(-inf) = -inf / inf = NaN.
    return tl.div_rn(x, 1.0 + libdevice.exp(-x))


@triton.jit
def bi_mul_quantize_kernel(
    a_ptr, b_ptr, q_ptr, scale_ptr,
    N,
    stride_am, stride_bm, stride_qm,
    SILU_A: tl.constexpr,
    FP8_MAX: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_exists = offs < N
    a = tl.load(a_ptr + row * stride_am + offs, mask=col_exists, other=0.0)
    b = tl.load(b_ptr + row * stride_bm + offs, mask=col_exists, other=0.0)
    if SILU_A:
        # Rounded to the activation dtype: torch stores silu(gate) before multiplying.
        a = _silu(_widen_to_fp32(a)).to(a.dtype)
    # Rounded to the activation dtype first: the down projection's input is the product as
    # torch stores it.
    product = (_widen_to_fp32(a) * _widen_to_fp32(b)).to(a.dtype)
    rounded = quantize_to_e4m3_grid(product, tl.load(scale_ptr), FP8_MAX)
    tl.store(q_ptr + row * stride_qm + offs, rounded.to(q_ptr.dtype.element_ty),
             mask=col_exists)
