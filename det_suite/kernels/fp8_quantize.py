"""Static per-tensor FP8 activation quantization: q = fp8(clamp(x / input_scale, -448, 448)).

Elementwise, so batch-invariant by construction. The specification is torch's
`(x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)`, byte for byte:

* x is widened to fp32 exactly, and divided with IEEE round-to-nearest (`div_rn`), as torch's
  `x.float() / scale` is.
* the clamp propagates NaN (a NaN activation stays NaN) and saturates +-Inf to +-448.
* the clamped value is rounded to the e4m3 grid (round-to-nearest-even) in fp32 arithmetic,
  and only then cast, so the cast has nothing left to round and is exact in every backend.

Casts are kept out of the rounding because Triton 3.6's interpreter converts fp32 to fp8 by
truncating bits (ties round away from zero, the carry into the exponent is lost: -125 -> -64)
and knows no NaN or Inf: it clamps the exponent to e4m3's largest and keeps the top three
mantissa bits, so the default fp32 NaN 0x7fc00000 became 0x7c = 384.0 and a NaN row came
out finite on the CPU while it is NaN on a GPU. Every value handed to the cast is therefore a
point of the e4m3 grid written in fp32, NaN included (see `_round_to_e4m3_grid`). The same
interpreter converts bfloat16 subnormals to zero on widening, hence `_widen_to_fp32`.

On a GPU none of this changes a bit of a non-NaN result: the rounding is the cast's own
round-to-nearest-even, and both widenings are exact conversions.
"""

import triton
import triton.language as tl

# float8_e4m3fn's NaN (0x7f / 0xff, the only NaN encodings) widened to fp32: all-ones
# exponent and e4m3's three mantissa bits set, the 20 bits below them zero (torch's
# `float8 -> float` gives exactly these bits).
E4M3_NAN_AS_FP32_BITS = tl.constexpr(0x7FF00000)
FP32_SIGN_BIT = tl.constexpr(0x80000000)


@triton.jit
def _widen_to_fp32(x):
    # bf16 is the top half of an fp32, so widening is a 16-bit shift, exact for every value
    # (subnormals and NaN payloads too). Spelled out because the interpreter's bf16 -> fp32
    # conversion turns bf16 subnormals into zero; fp16 and fp32 widen correctly everywhere.
    if x.dtype == tl.bfloat16:
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    return x.to(tl.float32)


@triton.jit
def _round_to_e4m3_grid(v):
    # Adding then subtracting 2**(step_exponent + 23) makes the fp32 adder round |v| to a
    # multiple of the e4m3 step with round-to-nearest-even. e4m3 has 3 mantissa bits and
    # its subnormals share the step of the smallest normal binade (2**-6). Callers clamp to
    # +-448 first, so no finite |v| rounds past e4m3's largest value, and Inf never arrives.
    bits = v.to(tl.uint32, bitcast=True)
    sign = bits & FP32_SIGN_BIT
    exponent = ((bits >> 23) & 0xFF).to(tl.int32) - 127
    step_exponent = tl.maximum(exponent, -6) - 3
    magic = ((step_exponent + 23 + 127) << 23).to(tl.uint32).to(tl.float32, bitcast=True)
    magnitude = tl.abs(v)
    rounded = (magnitude + magic) - magic
    # Or-ing the sign back keeps -0.0 (the adder returns +0.0) and every negative value.
    on_grid = (rounded.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    # NaN has no step; its grid point is e4m3's NaN, whose low 20 fp32 mantissa bits are
    # zero, so even a cast that truncates mantissa bits and ignores NaN (the interpreter's)
    # yields 0x7f / 0xff. An arbitrary NaN (0x7fc00000) would not.
    nan_on_grid = (sign | E4M3_NAN_AS_FP32_BITS).to(tl.float32, bitcast=True)
    is_nan = v != v
    return tl.where(is_nan, nan_on_grid, on_grid)


@triton.jit
def quantize_to_e4m3_grid(x, scale, FP8_MAX: tl.constexpr):
    """x (any float dtype) / scale, clamped, rounded to the e4m3 grid, in fp32: the one
    definition of static quantization, shared by every kernel that quantizes (a cast of the
    result to float8_e4m3fn is exact)."""
    scaled = tl.div_rn(_widen_to_fp32(x), scale)  # IEEE division, as torch's x / scale
    # PropagateNan.ALL: a NaN stays NaN through the clamp instead of becoming +-448.
    clamped = tl.minimum(tl.maximum(scaled, -FP8_MAX, propagate_nan=tl.PropagateNan.ALL),
                         FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    return _round_to_e4m3_grid(clamped)


@triton.jit
def fp8_quantize_kernel(
    x_ptr, q_ptr, scale_ptr,
    M, K,
    stride_xm, stride_xk,
    stride_qm, stride_qk,
    FP8_MAX: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # One program quantizes one BLOCK_M x BLOCK_K tile; strides make any layout of x work.
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    # Edge tiles stick out past M and K: load and store only the elements that exist.
    in_bounds = (offs_m[:, None] < M) & (offs_k[None, :] < K)

    scale = tl.load(scale_ptr)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                mask=in_bounds, other=0.0)
    rounded = quantize_to_e4m3_grid(x, scale, FP8_MAX)
    # `rounded` is already an e4m3 value, so this cast is exact.
    tl.store(q_ptr + offs_m[:, None] * stride_qm + offs_k[None, :] * stride_qk,
             rounded.to(q_ptr.dtype.element_ty), mask=in_bounds)
