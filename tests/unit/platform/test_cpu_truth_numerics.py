"""On the CPU the kernels compute what the GPU computes, bit for bit (issue 10).

Triton's interpreter differs from a GPU in four places that reach det-suite's outputs; the
interpreter switch makes it GPU-faithful (det_suite.platform.gpu_faithful_interpreter).
Each test states the GPU's behaviour as the expected value, so the same test runs on a GPU
(the `device` fixture) and there checks the claim against the hardware:

* a NaN in a row of x makes that row's output NaN (and no other); +-Inf saturates;
* BF16 outputs are rounded to nearest even, never truncated (FP16 too);
* bf16 <-> fp32 casts inside a kernel: round to nearest even one way, exact the other;
* tl.maximum / tl.minimum return the non-NaN operand unless asked to propagate NaN.

The exact references avoid accumulation-order questions: operands are small integers
(exact FP8 values), so every partial sum is an integer far below 2**24 and the fp32
accumulator is exact in any order; only the epilogue (scale, bias, cast) rounds, and torch
rounds it the way the GPU does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from det_suite.kernels.fp8_constants import FP8_E4M3_MAX
from det_suite.models.synthetic_linear import make_activations, make_fp8_linear
from det_suite.ops import fp8_linear
from det_suite.platform.gpu_faithful_interpreter import round_fp32_to_bf16_bits

OUT_DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]
# Row counts that select each BLOCK_M of the interpreter's (SM12x) table: 16, 32, 128.
ROWS = [pytest.param(1, id="m1"), pytest.param(20, id="m20"), pytest.param(40, id="m40")]


# ---------------------------------------------------------------- NaN and Inf in x

@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("dtype", OUT_DTYPES)
def test_nan_in_x_makes_exactly_its_row_nan(device, dtype, m, bias):
    layer = make_fp8_linear(32, 64, bias_dtype=dtype if bias else None, device=device)
    x = make_activations(m, 64, dtype=dtype, device=device)
    row = m // 2
    x[row, 7] = float("nan")
    y = fp8_linear(x, *layer.args()).cpu()
    expected = torch.zeros(m, 32, dtype=torch.bool)
    expected[row] = True
    assert torch.equal(y.isnan(), expected)


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["plus-inf", "minus-inf"])
@pytest.mark.parametrize("dtype", OUT_DTYPES)
def test_inf_in_x_saturates_like_the_largest_fp8_value(device, dtype, sign):
    layer = make_fp8_linear(32, 64, device=device)
    x = make_activations(3, 64, dtype=dtype, device=device)
    saturated = x.clone()
    x[1, 7] = sign * float("inf")
    # The largest input that quantizes to +-448 exactly: 448 * input_scale.
    saturated[1, 7] = (sign * FP8_E4M3_MAX * layer.input_scale).to(dtype)
    assert torch.equal(fp8_linear(x, *layer.args()), fp8_linear(saturated, *layer.args()))


# ---------------------------------------------------------------- rounding of the output

def _integer_operands(m: int, n: int, k: int, seed: int):
    """x (integers in [-8, 8], exact in BF16 and FP8 at input_scale 1) and an FP8 weight of
    integers in [-8, 8]: every product and partial sum is an exact small integer."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-8, 9, (m, k), generator=gen).float()
    w = torch.randint(-8, 9, (n, k), generator=gen).float()
    return x, w.to(torch.float8_e4m3fn)


def _epilogue_reference(x, w8, scale: torch.Tensor, bias, dtype):
    """What the GPU's epilogue computes: exact acc * scale in fp32, + bias in fp32, cast
    with round-to-nearest-even (torch's cast does the same)."""
    acc = (x.double() @ w8.double().T).float()  # exact: integers below 2**24
    out = acc * scale
    if bias is not None:
        out = out + bias.float()
    return out, out.to(dtype)


# weight_scale 1 + 2**-8 puts bits just past BF16's mantissa: exact ties (acc odd powers of
# two), halves rounded up and down; 0.0173 is an arbitrary scale.
SCALES = [pytest.param(1.0 + 2.0 ** -8, id="ties"), pytest.param(0.0173, id="arbitrary")]


@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("weight_scale", SCALES)
@pytest.mark.parametrize("dtype", OUT_DTYPES)
def test_output_is_the_epilogue_rounded_to_nearest_even(device, bit_exact, dtype,
                                                        weight_scale, with_bias):
    x, w8 = _integer_operands(24, 64, 32, seed=3)
    one = torch.ones((), dtype=torch.float32)
    scale = torch.tensor(weight_scale, dtype=torch.float32)
    bias = (torch.linspace(-3, 3, 64) * 0.37).to(dtype) if with_bias else None
    y = fp8_linear(x.to(dtype).to(device), w8.to(device), scale.to(device), one.to(device),
                   bias.to(device) if bias is not None else None)
    _, expected = _epilogue_reference(x, w8, one * scale, bias, dtype)
    assert bit_exact(y.cpu(), expected)


def test_bf16_rounding_cases_are_exercised():
    """Counterpart of the test above: on its operands, truncating the fp32 epilogue to BF16
    (what Triton 3.6's interpreter does on its own) differs from rounding, ties included."""
    x, w8 = _integer_operands(24, 64, 32, seed=3)
    out32, rounded = _epilogue_reference(x, w8, torch.tensor(1.0 + 2.0 ** -8), None,
                                         torch.bfloat16)
    low = out32.view(torch.int32) & 0xFFFF
    truncated = (out32.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)
    assert int((low == 0x8000).sum()) > 0          # exact ties
    assert int((truncated != rounded).sum()) > 0   # rounded up, so truncation is caught


# ---------------------------------------------------------------- casts inside a kernel

@triton.jit
def _cast_kernel(src_ptr, dst_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs).to(dst_ptr.dtype.element_ty))


def _from_bits(bits: list[int], dtype: torch.dtype) -> torch.Tensor:
    unsigned, signed = {torch.float32: (np.uint32, np.int32),
                        torch.bfloat16: (np.uint16, np.int16)}[dtype]
    return torch.from_numpy(np.array(bits, dtype=unsigned).view(signed)).view(dtype)


FP32_TO_BF16 = {
    "tie-to-even-down": 0x3F808000, "tie-to-even-up": 0x3F818000,
    "above-half": 0x3F808001, "below-half": 0x3F807FFF,
    "carry-into-exponent": 0x3FFF8000, "overflow-to-inf": 0x7F7FFFFF,
    "negative-tie": 0xBF818000, "fp32-subnormal": 0x00018000,
}
BF16_TO_FP32 = {
    "smallest-subnormal": 0x0001, "negative-subnormal": 0x8001, "largest-subnormal": 0x007F,
    "negative-zero": 0x8000, "inf": 0x7F80, "one": 0x3F80,
}


def _cast(src: torch.Tensor, dst_dtype, device) -> torch.Tensor:
    padded = torch.zeros(8, dtype=src.dtype)
    padded[:src.numel()] = src
    out = torch.empty(8, dtype=dst_dtype, device=device)
    _cast_kernel[(1,)](padded.to(device), out, N=8)
    return out.cpu()[:src.numel()]


@pytest.mark.parametrize("case", list(FP32_TO_BF16))
def test_fp32_to_bf16_cast_rounds_to_nearest_even(device, bit_exact, case):
    src = _from_bits([FP32_TO_BF16[case]], torch.float32)
    assert bit_exact(_cast(src, torch.bfloat16, device), src.to(torch.bfloat16))


def test_fp32_to_bf16_cast_keeps_nan(device):
    src = _from_bits([0x7FC00000, 0xFFC00000, 0x7F800001], torch.float32)
    assert _cast(src, torch.bfloat16, device).isnan().all()


@pytest.mark.parametrize("case", list(BF16_TO_FP32))
def test_bf16_to_fp32_cast_is_exact(device, bit_exact, case):
    src = _from_bits([BF16_TO_FP32[case]], torch.bfloat16)
    assert bit_exact(_cast(src, torch.float32, device), src.float())


def test_numpy_bf16_rounding_matches_torch_on_random_bits():
    """The replacement cast itself, on 2**16 random fp32 patterns (NaN compared as NaN)."""
    bits = np.random.default_rng(0).integers(0, 2 ** 32, 1 << 16, dtype=np.uint32)
    values = bits.view(np.float32)
    ours = torch.from_numpy(round_fp32_to_bf16_bits(values).view(np.int16)).view(torch.bfloat16)
    theirs = torch.from_numpy(values.copy()).to(torch.bfloat16)
    nan = theirs.isnan()
    assert torch.equal(ours.isnan(), nan)
    assert torch.equal(ours[~nan].view(torch.int16), theirs[~nan].view(torch.int16))


# ---------------------------------------------------------------- max / min and NaN

@triton.jit
def _max_min_kernel(x_ptr, y_ptr, out_ptr, N: tl.constexpr, PROPAGATE_NAN: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if PROPAGATE_NAN:
        biggest = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
        smallest = tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL)
    else:
        biggest = tl.maximum(x, y)
        smallest = tl.minimum(x, y)
    tl.store(out_ptr + offs, biggest)
    tl.store(out_ptr + N + offs, smallest)


@pytest.mark.parametrize("propagate", [False, True], ids=["nan-ignored", "nan-propagated"])
def test_max_and_min_treat_nan_like_the_gpu(device, bit_exact, propagate):
    nan = float("nan")
    x = torch.tensor([nan, 1.0, nan, -2.0, 3.0, nan, 5.0, -448.0])
    y = torch.tensor([2.0, nan, nan, -3.0, 4.0, -448.0, 5.0, nan])
    out = torch.empty(16, device=device)
    _max_min_kernel[(1,)](x.to(device), y.to(device), out, N=8, PROPAGATE_NAN=propagate)
    expected = (torch.cat([torch.maximum(x, y), torch.minimum(x, y)]) if propagate
                else torch.cat([torch.fmax(x, y), torch.fmin(x, y)]))
    out = out.cpu()
    assert torch.equal(out.isnan(), expected.isnan())
    assert bit_exact(out.nan_to_num(0.5), expected.nan_to_num(0.5))
