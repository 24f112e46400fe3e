"""quantize_fp8, byte for byte against torch's own conversion, on every representable edge.

The specification is torch: ``(x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)``
(`torch_reference`). Every comparison is of the float8 bytes (`assert_same_bytes`), so a
result that is merely close, or a -0.0 that became +0.0, fails.

NaN: float8_e4m3fn has two NaN encodings, 0x7f and 0xff, and the comparison accepts either
where torch gives a NaN: the sign of a NaN is not part of the contract. IEEE 754 does not
interpret the sign of a NaN, and hardware disagrees on it: x86 keeps the sign of a NaN
operand through `x / scale`, an NVIDIA GPU returns its canonical +NaN, so torch itself
quantizes a -NaN to 0xff on the CPU and to 0x7f on CUDA. What must hold, and is checked, is
NaN in -> NaN out, on the CPU interpreter as on a GPU.

Kernels run on the Triton interpreter when there is no GPU; each test batches its values
into one tensor, so it costs one or two launches.
"""

from __future__ import annotations

import math

import pytest
import torch

from det_suite.kernels.fp8_constants import FP8_E4M3_MAX
from det_suite.ops import fp8_linear, quantize_fp8
from det_suite.models.synthetic_linear import make_activations, make_fp8_linear

E4M3 = torch.float8_e4m3fn
NAN_BYTES = (0x7F, 0xFF)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ALL_DTYPES = list(DTYPES)
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
ALL_BYTES = torch.arange(256, dtype=torch.uint8)
ALL_E4M3 = ALL_BYTES.view(E4M3).float()  # the 256 encodings' values; 0x7f, 0xff are NaN
# Bytes 0x00..0x7e: the 127 non-negative finite values, 0 to 448, in increasing order.
POSITIVE_GRID = ALL_E4M3[:0x7F]
# The 126 midpoints between adjacent ones (5 significant bits: exact in fp32 and fp64).
MIDPOINTS = (POSITIVE_GRID[:-1] + POSITIVE_GRID[1:]) / 2


# ---------------------------------------------------------------- helpers

def torch_reference(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (x.float() / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(E4M3)


def _bytes_with_one_nan(q: torch.Tensor) -> torch.Tensor:
    b = q.view(torch.uint8).cpu()
    return torch.where((b & 0x7F) == 0x7F, torch.full_like(b, 0x7F), b)


def assert_same_bytes(actual: torch.Tensor, expected: torch.Tensor, x: torch.Tensor | None = None):
    """The float8 bytes of `actual` equal those of `expected`, except that 0x7f and 0xff (the
    two NaN encodings) count as one (see the module docstring)."""
    assert actual.dtype == E4M3 and expected.dtype == E4M3
    assert actual.shape == expected.shape
    got, want = _bytes_with_one_nan(actual), _bytes_with_one_nan(expected)
    if torch.equal(got, want):
        return
    wrong = (got != want).nonzero().tolist()
    shown = []
    for index in wrong[:8]:
        i = tuple(index)
        value = f"x={x.cpu()[i].item()!r} " if x is not None else ""
        shown.append(f"{i}: {value}got 0x{actual.view(torch.uint8).cpu()[i].item():02x} "
                     f"want 0x{expected.view(torch.uint8).cpu()[i].item():02x}")
    raise AssertionError(f"{len(wrong)} of {got.numel()} bytes differ: " + "; ".join(shown))


def fp8_from_bytes(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8).view(E4M3)


def scale_tensor(value: float, device) -> torch.Tensor:
    scale = torch.tensor([value], dtype=torch.float32)
    assert scale.item() > 0.0, f"{value} is not a positive float32"
    return scale.to(device)


def step(x: torch.Tensor, ulps: int) -> torch.Tensor:
    """x moved by `ulps` units in the last place of its dtype (ulps > 0: away from zero),
    for finite nonzero x that the move takes neither across zero nor to Inf."""
    return (x.view(INT_VIEW[x.dtype]) + ulps).view(x.dtype)


def quantize_and_reference(x: torch.Tensor, scale: float, device):
    s = scale_tensor(scale, device)
    return quantize_fp8(x.to(device), s), torch_reference(x, s.cpu())


DTYPE_PARAMS = [pytest.param(dtype, id=name) for name, dtype in DTYPES.items()]


# ---------------------------------------------------------------- the reference itself

def test_torch_reference_clamp_keeps_nan():
    x = torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf")])
    clamped = x.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    assert clamped[:2].isnan().all()
    assert clamped[2:].tolist() == [FP8_E4M3_MAX, -FP8_E4M3_MAX]


def test_torch_reference_rounds_ties_to_even():
    """Every midpoint of adjacent e4m3 values goes to the neighbour with an even last
    mantissa bit (its byte is even), in both signs: the spec is round-to-nearest-even."""
    for sign in (1.0, -1.0):
        q = (sign * MIDPOINTS).to(E4M3).view(torch.uint8)
        low_b, high_b = ALL_BYTES[:0x7E], ALL_BYTES[1:0x7F]
        if sign < 0:
            low_b, high_b = low_b | 0x80, high_b | 0x80
        assert ((q == low_b) | (q == high_b)).all()
        assert (q % 2 == 0).all()


# ---------------------------------------------------------------- every byte pattern

# name: (scale, the dtypes that hold x = value * scale for every e4m3 value)
ROUND_TRIP_SCALES = {
    "scale-1": (1.0, ALL_DTYPES),
    "scale-pow2-2^-4": (2.0 ** -4, ALL_DTYPES),
    "scale-pow2-2^5": (32.0, ALL_DTYPES),
    "scale-0.0173": (0.0173, ALL_DTYPES),
    # x down to 2**-129: bf16 and fp32 subnormals (fp16 underflows, so it is left out).
    "scale-2^-120-subnormal-x": (2.0 ** -120, ["bf16", "fp32"]),
    # The scale itself is an fp32 subnormal; only fp32 holds x = value * 2**-130.
    "scale-2^-130-subnormal-scale": (2.0 ** -130, ["fp32"]),
}
ROUND_TRIP_CASES = [pytest.param(scale, DTYPES[d], id=f"{name}-{d}")
                    for name, (scale, dtypes) in ROUND_TRIP_SCALES.items() for d in dtypes]


@pytest.mark.parametrize("scale,dtype", ROUND_TRIP_CASES)
def test_every_e4m3_byte_round_trips(scale, dtype, device):
    """x = value * scale for all 256 encodings (NaN, +-0, subnormals, +-448 included):
    quantizing x with `scale` gives back the value's own byte."""
    s = scale_tensor(scale, device)
    exact = ALL_E4M3.double() * s.cpu().double()
    x = exact.to(dtype)
    # Premise: the dtype holds every value * scale to within 2**-6 relative, well inside
    # e4m3's narrowest half-step (2**-4 / 1.875), so x / scale still rounds to the value.
    finite = exact.isfinite()
    assert (x.isnan() == exact.isnan()).all()
    assert ((x[finite].double() - exact[finite]).abs() <= 2.0 ** -6 * exact[finite].abs()).all()
    x = x.reshape(2, 128)
    expected = ALL_BYTES.view(E4M3).reshape(2, 128)
    assert_same_bytes(torch_reference(x, s.cpu()), expected, x)  # the spec agrees
    assert_same_bytes(quantize_fp8(x.to(device), s), expected, x)


# ---------------------------------------------------------------- ties

def _midpoints_and_neighbours(dtype, scale):
    """Every midpoint of adjacent e4m3 values (subnormal and normal binades), and the dtype
    values one ulp below and above it, times the (power-of-two) scale, in both signs."""
    mid = (MIDPOINTS * scale).to(dtype)
    assert (mid.double() == MIDPOINTS.double() * scale).all(), \
        "a midpoint is not exact in the dtype"
    positive = torch.stack([step(mid, -1), mid, step(mid, 1)])
    return torch.cat([positive, -positive])  # (6, 126)


@pytest.mark.parametrize("scale", [1.0, 2.0 ** -4], ids=["scale-1", "scale-pow2-2^-4"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_midpoints_and_their_neighbours_match_torch(dtype, scale, device):
    x = _midpoints_and_neighbours(dtype, scale)
    q, ref = quantize_and_reference(x, scale, device)
    assert_same_bytes(q, ref, x)


def _quotients_near_midpoints(scale: float, ulps: int = 4):
    """fp32 x whose exact quotient x / scale lies within a few ulps of an e4m3 midpoint:
    the fp32 values around midpoint * scale. Only a correctly rounded division (IEEE div_rn)
    puts every quotient on torch's side of the tie; an approximate one (div.full.f32, up to
    2 ulp) moves some across it."""
    target = (MIDPOINTS.double() * scale).float()
    around = torch.stack([step(target, d) for d in range(-ulps, ulps + 1) if d])
    around = torch.cat([around, target[None]]).flatten()
    return torch.cat([around, -around])[None, :]


NON_POWER_OF_TWO_SCALES = [pytest.param(v, id=f"scale-{v}") for v in
                           (0.0173, 0.3, 1.7, 3.1415927, 97.31)]


@pytest.mark.parametrize("scale", NON_POWER_OF_TWO_SCALES)
def test_division_by_a_non_power_of_two_scale_rounds_like_torch(scale, device):
    x = _quotients_near_midpoints(scale)
    q, ref = quantize_and_reference(x, scale, device)
    assert_same_bytes(q, ref, x)


def test_near_midpoint_inputs_expose_an_approximate_division():
    """Counterpart: a quotient rounded to fp32 after an error of 1-2 ulp (what an
    approximate division gives) lands on the other side of a tie for some of these x."""
    scale = torch.tensor([0.0173])
    x = _quotients_near_midpoints(0.0173)
    exact = x.double() / scale.double()
    nudged = (exact * (1 + 2.0 ** -23)).float()  # 2**-23 relative: about one fp32 ulp
    wrong = nudged.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(E4M3)
    with pytest.raises(AssertionError, match="bytes differ"):
        assert_same_bytes(wrong, torch_reference(x, scale), x)


# ---------------------------------------------------------------- subnormals and zero

SUBNORMAL_CASES = {
    "min-subnormal-2^-9": ([2.0 ** -9], [0x01]),
    "every-subnormal": ([k * 2.0 ** -9 for k in range(1, 8)], list(range(1, 8))),
    "every-negative-subnormal": ([-k * 2.0 ** -9 for k in range(1, 8)],
                                 [0x80 | k for k in range(1, 8)]),
    "min-normal-2^-6": ([2.0 ** -6, -2.0 ** -6], [0x08, 0x88]),
    "half-min-subnormal-ties-to-zero": ([2.0 ** -10], [0x00]),
    "negative-half-min-subnormal-ties-to-negative-zero": ([-2.0 ** -10], [0x80]),
    "just-above-half-min-subnormal-rounds-up": ([2.0 ** -10 * (1 + 2.0 ** -7)], [0x01]),
    "three-halves-min-subnormal-ties-to-even-2^-8": ([3 * 2.0 ** -10], [0x02]),
    "below-half-min-subnormal-flushes-to-zero": ([2.0 ** -11, 2.0 ** -14, 2.0 ** -24],
                                                 [0x00, 0x00, 0x00]),
    "negative-below-half-flushes-to-negative-zero": ([-2.0 ** -11, -2.0 ** -24], [0x80, 0x80]),
    "positive-zero": ([0.0], [0x00]),
    "negative-zero-stays-negative": ([-0.0], [0x80]),
}


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("case", list(SUBNORMAL_CASES))
def test_subnormal_and_zero(case, dtype, device):
    values, expected_bytes = SUBNORMAL_CASES[case]
    x = torch.tensor([values], dtype=torch.float64).to(dtype)
    assert (x.double() == torch.tensor([values], dtype=torch.float64)).all()
    assert x.signbit().tolist() == [[math.copysign(1.0, v) < 0 for v in values]]
    expected = fp8_from_bytes([expected_bytes])
    q, ref = quantize_and_reference(x, 1.0, device)
    assert_same_bytes(ref, expected, x)  # the spec agrees with the table
    assert_same_bytes(q, expected, x)


# ---------------------------------------------------------------- saturation

BF16_MAX = torch.finfo(torch.bfloat16).max
FP16_MAX = torch.finfo(torch.float16).max
FP32_MAX = torch.finfo(torch.float32).max
INF = float("inf")
# case: (values, scale, dtypes holding the values exactly). Each value saturates to
# +-448 (0x7e / 0xfe by its sign) through the clamp. The cast alone would not do for the
# reference: torch 2.11 casts |v| > 464 to NaN (0x7f), torch 2.13 saturates it to 448.
SATURATION_CASES = {
    "max-finite-448": ([448.0, -448.0], 1.0, ALL_DTYPES),
    "above-448-below-midpoint": ([450.0, 456.0, 462.0, -462.0], 1.0, ALL_DTYPES),
    "midpoint-448-480-is-464": ([464.0, -464.0], 1.0, ALL_DTYPES),
    "first-power-of-two-step-past-448": ([480.0, 512.0, -480.0], 1.0, ALL_DTYPES),
    "1e4": ([1e4, -1e4], 1.0, ["fp16", "fp32"]),
    "fp16-max-65504": ([FP16_MAX, -FP16_MAX], 1.0, ["fp16", "fp32"]),
    "bf16-max": ([BF16_MAX, -BF16_MAX], 1.0, ["bf16", "fp32"]),
    "fp32-max": ([FP32_MAX, -FP32_MAX], 1.0, ["fp32"]),
    "division-overflows-to-inf": ([BF16_MAX, -BF16_MAX], 2.0 ** -4, ["bf16", "fp32"]),
    "scaled-past-448": ([1.0, 2.0, -1.0], 2.0 ** -9, ALL_DTYPES),
    "scaled-past-448-non-pow2": ([8.0, -8.0], 0.0173, ALL_DTYPES),
    "+inf": ([INF], 1.0, ALL_DTYPES),
    "-inf": ([-INF], 1.0, ALL_DTYPES),
    "inf-with-non-pow2-scale": ([INF, -INF], 0.0173, ALL_DTYPES),
}
SATURATION_PARAMS = [pytest.param(case, DTYPES[d], id=f"{case}-{d}")
                     for case, (_, _, dtypes) in SATURATION_CASES.items() for d in dtypes]


# The interpreter divides with numpy, which warns when x / scale overflows to Inf; here it
# is the case under test.
@pytest.mark.filterwarnings("ignore:overflow encountered in divide:RuntimeWarning")
@pytest.mark.parametrize("case,dtype", SATURATION_PARAMS)
def test_saturates_to_448(case, dtype, device):
    values, scale, _ = SATURATION_CASES[case]
    x = torch.tensor([values], dtype=torch.float64).to(dtype)
    assert (x.double() == torch.tensor([values], dtype=torch.float64)).all()
    expected = fp8_from_bytes([[0xFE if v < 0 else 0x7E for v in values]])
    q, ref = quantize_and_reference(x, scale, device)
    assert_same_bytes(ref, expected, x)
    assert_same_bytes(q, expected, x)


# ---------------------------------------------------------------- NaN

# NaN encodings of each dtype: its default quiet NaN, that negated, a signalling NaN with
# the smallest payload, and the all-ones canonical NaN of NVIDIA GPUs.
NAN_BITS = {
    torch.bfloat16: [0x7FC0, -0x0040, 0x7F81, 0x7FFF],        # -0x0040 is 0xffc0 as int16
    torch.float16: [0x7E00, -0x0200, 0x7C01, 0x7FFF],         # -0x0200 is 0xfe00
    torch.float32: [0x7FC00000, -0x00400000, 0x7F800001, 0x7FFFFFFF],
}


# numpy, dividing for the interpreter, flags the signalling NaN as an invalid operation.
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
@pytest.mark.parametrize("scale", [1.0, 0.0173], ids=["scale-1", "scale-0.0173"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_nan_stays_nan(dtype, scale, device):
    """Every NaN encoding of the input dtype quantizes to an e4m3 NaN (0x7f or 0xff),
    among finite neighbours that keep torch's bytes."""
    nans = torch.tensor(NAN_BITS[dtype], dtype=INT_VIEW[dtype]).view(dtype)
    assert nans.isnan().all()
    x = torch.linspace(-3, 3, 2 * 128).to(dtype).reshape(2, 128)
    where_nan = torch.zeros(2, 128, dtype=torch.bool)
    where_nan[0, [0, 5, 127, 64]] = True
    where_nan[1, [1, 77, 126, 100]] = True
    x[where_nan] = nans.repeat(2)
    q, ref = quantize_and_reference(x, scale, device)
    q = q.cpu()
    assert torch.equal(q.float().isnan(), where_nan)
    assert all(b in NAN_BYTES for b in q.view(torch.uint8)[where_nan].tolist())
    assert_same_bytes(q, ref, x)


# ---------------------------------------------------------------- random bulk

def _many_binades(dtype, scale, seed, shape=(64, 256)):
    """Values with both signs and magnitudes from 2**-12 (below e4m3's subnormals) to 2**10
    (past 448), log-uniform, times the scale."""
    gen = torch.Generator().manual_seed(seed)
    exponent = torch.empty(shape, dtype=torch.float64).uniform_(-12, 10, generator=gen)
    sign = torch.randint(0, 2, shape, generator=gen).double() * 2 - 1
    return (sign * torch.exp2(exponent) * scale).to(dtype)


@pytest.mark.parametrize("scale", [1.0, 0.0173], ids=["scale-1", "scale-0.0173"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_random_values_over_many_binades_match_torch(dtype, scale, device):
    x = _many_binades(dtype, scale, seed=0)
    q, ref = quantize_and_reference(x, scale, device)
    assert_same_bytes(q, ref, x)


RAGGED_SHAPES = [pytest.param(1, 1, id="1x1"), pytest.param(17, 129, id="17x129-both-tails"),
                 pytest.param(3, 300, id="3x300"), pytest.param(33, 5, id="33x5")]


@pytest.mark.parametrize("m,k", RAGGED_SHAPES)
def test_shapes_that_do_not_fill_a_tile_match_torch(m, k, device):
    x = _many_binades(torch.bfloat16, 1.0, seed=1, shape=(m, k))
    q, ref = quantize_and_reference(x, 1.0, device)
    assert_same_bytes(q, ref, x)


# ---------------------------------------------------------------- strides

def _strided_views(device):
    """Views made on the device (`.to(device)` of a view would copy it contiguous)."""
    gen = torch.Generator().manual_seed(2)

    def rand(*shape):
        return (torch.randn(*shape, generator=gen) * 40).to(torch.bfloat16).to(device)
    return {
        "transposed": rand(300, 40).t(),
        "every-other-column": rand(40, 600)[:, ::2],
        "every-third-row": rand(120, 300)[::3],
        "offset-slice": rand(50, 310)[7:47, 5:305],
        "transposed-slice": rand(320, 60)[10:310, 3:43].t(),
        "broadcast-row-stride-0": rand(1, 300).expand(40, 300),
    }


@pytest.mark.parametrize("layout", list(_strided_views("cpu")))
def test_non_contiguous_x_gives_contiguous_bytes(layout, device):
    x = _strided_views(device)[layout]
    assert not x.is_contiguous()
    s = scale_tensor(0.0173, device)
    q = quantize_fp8(x, s)
    assert q.shape == x.shape and q.is_contiguous()
    assert_same_bytes(q, quantize_fp8(x.contiguous(), s), x)
    assert_same_bytes(q, torch_reference(x.cpu(), s.cpu()), x)


# ---------------------------------------------------------------- positive controls

def _truncating_quantizer(x, scale):
    """Rounds toward zero instead of to nearest even: one byte down in magnitude wherever
    round-to-nearest went up in magnitude."""
    v = (x.float() / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    q = v.to(E4M3)
    went_up = q.float().abs() > v.abs()
    return (q.view(torch.uint8) - went_up.to(torch.uint8)).view(E4M3)


def _ties_away_quantizer(x, scale):
    """Rounds ties away from zero (the interpreter's own fp32 -> fp8 cast does)."""
    v = (x.float() / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    q = v.to(E4M3)
    below = q.float().abs() < v.abs()
    tie = below & ((v.abs() - q.float().abs()) * 2 ==
                   (q.view(torch.uint8) + 1).view(E4M3).float().abs() - q.float().abs())
    return (q.view(torch.uint8) + tie.to(torch.uint8)).view(E4M3)


def _nan_to_384_quantizer(x, scale):
    """The interpreter bug this suite was written for: NaN came out as 0x7c = 384.0."""
    q = torch_reference(x, scale).view(torch.uint8).clone()
    q[x.isnan()] = 0x7C
    return q.view(E4M3)


def _signless_zero_quantizer(x, scale):
    q = torch_reference(x, scale).view(torch.uint8).clone()
    q[q == 0x80] = 0x00
    return q.view(E4M3)


def _unclamped_nan_quantizer(x, scale):
    """No clamp, and a cast that turns everything past 448 into NaN."""
    q = torch_reference(x, scale).view(torch.uint8).clone()
    q[(x.float() / scale).abs() > FP8_E4M3_MAX] = 0x7F
    return q.view(E4M3)


def _control_inputs():
    bulk = _many_binades(torch.float32, 1.0, seed=3).flatten()
    ties = _midpoints_and_neighbours(torch.float32, 1.0).flatten()
    specials = torch.tensor([float("nan"), -0.0, 0.0, 500.0, -1e4, float("inf")])
    return torch.cat([bulk, ties, specials]).reshape(1, -1)


WRONG_QUANTIZERS = {
    "truncates-toward-zero": _truncating_quantizer,
    "ties-away-from-zero": _ties_away_quantizer,
    "nan-becomes-384": _nan_to_384_quantizer,
    "negative-zero-loses-sign": _signless_zero_quantizer,
    "no-clamp-saturates-to-nan": _unclamped_nan_quantizer,
}


@pytest.mark.parametrize("wrong", list(WRONG_QUANTIZERS))
def test_byte_comparison_detects_a_wrong_quantizer(wrong):
    x = _control_inputs()
    scale = torch.tensor([1.0])
    with pytest.raises(AssertionError, match="bytes differ"):
        assert_same_bytes(WRONG_QUANTIZERS[wrong](x, scale), torch_reference(x, scale), x)


def test_byte_comparison_ignores_only_the_sign_of_nan():
    assert_same_bytes(fp8_from_bytes([0x7F, 0xFF]), fp8_from_bytes([0xFF, 0x7F]))
    for got, want in [(0x7E, 0x7F), (0x00, 0x80), (0x7C, 0x7F), (0xFE, 0xFF), (0x01, 0x00)]:
        with pytest.raises(AssertionError, match="bytes differ"):
            assert_same_bytes(fp8_from_bytes([got]), fp8_from_bytes([want]))


# ---------------------------------------------------------------- the full linear

def test_fp8_linear_nan_row_poisons_only_its_own_row(device):
    layer = make_fp8_linear(64, 128, device=device)
    x = make_activations(4, 128, device=device)
    x[1, 5] = float("nan")
    # The quantizer's part holds on every backend: exactly that one element is NaN.
    assert quantize_fp8(x, layer.input_scale).float().isnan().nonzero().tolist() == [[1, 5]]
    y = fp8_linear(x, layer.weight, layer.weight_scale, layer.input_scale)
    assert torch.isfinite(y[[0, 2, 3]]).all()
    assert torch.isnan(y[1]).all()
