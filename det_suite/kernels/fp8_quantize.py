"""Static per-tensor FP8 activation quantization: q = fp8(clamp(x / input_scale, -448, 448)).

Elementwise, so batch-invariant by construction. Division is IEEE round-to-nearest
(`div_rn`) so the result matches `torch`'s `x.float() / scale` bit for bit; NaN propagates
through the clamp (a NaN activation stays NaN) and +-Inf saturates to +-448.

The value is rounded to the e4m3 grid (round-to-nearest-even) in fp32 arithmetic before the
cast, so the cast itself is exact and every backend gives torch's bits: Triton 3.6's
interpreter rounds ties away from zero and loses the carry into the exponent (-125 -> -64),
which would make CPU runs disagree with the GPU.
"""

import triton
import triton.language as tl


@triton.jit
def _round_to_e4m3_grid(v):
    # Adding then subtracting 2**(step_exponent + 23) makes the fp32 adder round |v| to a
    # multiple of the e4m3 step with round-to-nearest-even. e4m3 has 3 mantissa bits and
    # its subnormals share the step of the smallest normal binade (2**-6).
    bits = v.to(tl.uint32, bitcast=True)
    exponent = ((bits >> 23) & 0xFF).to(tl.int32) - 127
    step_exponent = tl.maximum(exponent, -6) - 3
    magic = ((step_exponent + 23 + 127) << 23).to(tl.uint32).to(tl.float32, bitcast=True)
    magnitude = tl.abs(v)
    rounded = (magnitude + magic) - magic
    signed = (rounded.to(tl.uint32, bitcast=True) | (bits & 0x80000000)).to(tl.float32, bitcast=True)
    return tl.where(v != v, v, signed)  # NaN has no grid; keep it NaN


@triton.jit
def fp8_quantize_kernel(
    x_ptr, q_ptr, scale_ptr,
    M, K,
    stride_xm, stride_xk,
    stride_qm, stride_qk,
    FP8_MAX: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    in_bounds = (offs_m[:, None] < M) & (offs_k[None, :] < K)

    scale = tl.load(scale_ptr)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                mask=in_bounds, other=0.0).to(tl.float32)
    scaled = tl.div_rn(x, scale)
    clamped = tl.minimum(tl.maximum(scaled, -FP8_MAX, propagate_nan=tl.PropagateNan.ALL),
                         FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    rounded = _round_to_e4m3_grid(clamped)
    tl.store(q_ptr + offs_m[:, None] * stride_qm + offs_k[None, :] * stride_qk,
             rounded.to(q_ptr.dtype.element_ty), mask=in_bounds)
