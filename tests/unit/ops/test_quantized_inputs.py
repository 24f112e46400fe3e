"""Producers that quantize FP8 linears' inputs in their own pass (`ops.quantized_inputs`):
each result is byte for byte the unfused ops' (the norm or the product, then
`quantize_fp8`), and a linear on it gives `fp8_linear`'s bits. On the CPU interpreter here;
`test_fused_producers_on_gpu` repeats the byte checks with compiled kernels."""

import pytest
import torch

from det_suite.ops import fp8_linear, quantize_fp8
from det_suite.ops.batch_invariant import rms_norm
from det_suite.ops.bi_launch_spec import (RMSNORM_QUANTIZE_TILE, mul_quantize_launch_spec,
                                          rmsnorm_quantize_launch_spec)
from det_suite.ops.launch import run_kernel
from det_suite.ops.quantized_inputs import (QuantizedInput, add_rms_norm_quantized_stacked,
                                            linear_on_quantized, mul_quantized,
                                            rms_norm_quantized, rms_norm_quantized_stacked,
                                            silu_mul_quantized)

DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]
# Three different scales: one saturates many elements, one leaves most subnormal in e4m3.
SCALES = (0.01, 0.0005, 0.2)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def _randn(*shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _scales(count):
    return [torch.tensor([s], dtype=torch.float32) for s in SCALES[:count]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", [(1, 16), (3, 80), (5, 1040)],
                         ids=["one-row", "ragged-width", "two-chunks-of-the-norm-tile"])
@pytest.mark.parametrize("outputs", [1, 2, 3], ids=lambda n: f"{n}-scales")
def test_norm_quantized_equals_norm_then_quantize(dtype, rows, hidden, outputs):
    x = _randn(rows, hidden, dtype=dtype, seed=rows)
    weight = _randn(hidden, dtype=dtype, seed=7, scale=0.5) + 1
    scales = _scales(outputs)
    fused = rms_norm_quantized(x, weight, 1e-6, scales)
    normed = rms_norm(x, weight, 1e-6)
    assert len(fused) == outputs
    for q, s in zip(fused, scales):
        assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
        assert torch.equal(_bytes(q), _bytes(quantize_fp8(normed, s)))


def test_norm_quantized_keeps_leading_dimensions():
    x = _randn(2, 3, 32, dtype=torch.bfloat16, seed=1)
    weight = torch.ones(32, dtype=torch.bfloat16)
    (q,) = rms_norm_quantized(x, weight, 1e-6, _scales(1))
    assert q.shape == (2, 3, 32)
    flat = rms_norm_quantized(x.reshape(6, 32), weight, 1e-6, _scales(1))[0]
    assert torch.equal(_bytes(q.reshape(6, 32)), _bytes(flat))


def test_a_row_is_quantized_the_same_whatever_else_is_in_the_call():
    x = _randn(9, 48, dtype=torch.bfloat16, seed=3)
    weight = _randn(48, dtype=torch.bfloat16, seed=4) + 1
    together = rms_norm_quantized(x, weight, 1e-6, _scales(2))
    for row in (0, 4, 8):
        alone = rms_norm_quantized(x[row:row + 1], weight, 1e-6, _scales(2))
        for q_all, q_one in zip(together, alone):
            assert torch.equal(_bytes(q_all[row:row + 1]), _bytes(q_one))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 16), (4, 1100)], ids=["one-row", "block-tail"])
def test_mul_quantized_equals_product_then_quantize(dtype, rows, width):
    a = _randn(rows, width, dtype=dtype, seed=5, scale=3.0)
    b = _randn(rows, width, dtype=dtype, seed=6, scale=3.0)
    (scale,) = _scales(1)
    assert torch.equal(_bytes(mul_quantized(a, b, scale)),
                       _bytes(quantize_fp8(a * b, scale)))


def test_mul_quantized_keeps_nan():
    a = torch.ones(2, 16, dtype=torch.bfloat16)
    a[1, 3] = float("nan")
    q = mul_quantized(a, torch.ones_like(a), _scales(1)[0])
    assert torch.isnan(q[1, 3].float()) and not torch.isnan(q[0].float()).any()


def test_a_linear_on_a_quantized_input_gives_fp8_linear_bits():
    x = _randn(3, 256, dtype=torch.bfloat16, seed=8)
    weight = (_randn(64, 256, dtype=torch.float32, seed=9) * 0.1).to(torch.float8_e4m3fn)
    w_scale, in_scale = torch.tensor([0.02]), torch.tensor([0.05])
    (q,) = rms_norm_quantized(x, torch.ones(256, dtype=torch.bfloat16), 1e-6, [in_scale])
    fused = linear_on_quantized(QuantizedInput(q, in_scale, x.dtype), weight, w_scale, in_scale)
    unfused = fp8_linear(rms_norm(x, torch.ones(256, dtype=torch.bfloat16), 1e-6), weight,
                         w_scale, in_scale)
    assert torch.equal(fused, unfused)


@pytest.mark.parametrize("scales,match", [
    ([], "1 to 3 input scales"),
    ([torch.tensor([0.1])] * 4, "1 to 3 input scales"),
    ([torch.tensor([-0.1])], r"scales\[0\]"),
], ids=["no-scale", "four-scales", "negative-scale"])
def test_norm_quantized_refuses_bad_scales(scales, match):
    with pytest.raises(ValueError, match=match):
        rms_norm_quantized(torch.ones(1, 16, dtype=torch.bfloat16),
                           torch.ones(16, dtype=torch.bfloat16), 1e-6, scales)


def test_mul_quantized_refuses_mismatched_operands():
    with pytest.raises(ValueError, match="b must have a's shape"):
        mul_quantized(torch.ones(2, 16, dtype=torch.bfloat16),
                      torch.ones(2, 8, dtype=torch.bfloat16), torch.tensor([0.1]))


def test_a_linear_refuses_an_input_quantized_with_another_scale():
    x = QuantizedInput(torch.zeros(1, 32, dtype=torch.float8_e4m3fn), torch.tensor([0.1]),
                       torch.bfloat16)
    with pytest.raises(ValueError, match="another scale"):
        linear_on_quantized(x, torch.zeros(16, 32, dtype=torch.float8_e4m3fn),
                            torch.tensor([1.0]), torch.tensor([0.1]))


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 7, 300], ids=lambda r: f"T{r}")
def test_fused_producers_on_gpu(rows):
    """Compiled kernels at Qwen3-8B's widths (hidden 4096, intermediate 12288)."""
    x = _randn(rows, 4096, dtype=torch.bfloat16, seed=rows).cuda()
    weight = (_randn(4096, dtype=torch.bfloat16, seed=2) + 1).cuda()
    scales = [s.cuda() for s in _scales(3)]
    normed = rms_norm(x, weight, 1e-6)
    for q, s in zip(rms_norm_quantized(x, weight, 1e-6, scales), scales):
        assert torch.equal(_bytes(q), _bytes(quantize_fp8(normed, s)))
    gate = _randn(rows, 12288, dtype=torch.bfloat16, seed=3, scale=3.0).cuda()
    up = _randn(rows, 12288, dtype=torch.bfloat16, seed=4, scale=3.0).cuda()
    silu = torch.nn.functional.silu(gate)
    assert torch.equal(_bytes(mul_quantized(silu, up, scales[0])),
                       _bytes(quantize_fp8(silu * up, scales[0])))


# ------------------------------------------------ column-parallel programs, the residual add

BLOCK_H = RMSNORM_QUANTIZE_TILE["BLOCK_H"]
# Widths over 1, 2 and 3 column programs, each with a ragged last chunk: every program of a
# row must recompute the same rms whatever columns it writes.
CHUNKS = [pytest.param(BLOCK_H - 24, id="one-chunk"), pytest.param(BLOCK_H + 16, id="two-chunks"),
          pytest.param(2 * BLOCK_H + 52, id="three-chunks")]


@pytest.mark.parametrize("residual", [False, True], ids=["norm", "add-norm"])
@pytest.mark.parametrize("hidden,programs", [(1, 1), (BLOCK_H, 1), (BLOCK_H + 1, 2),
                                             (4096, 4096 // BLOCK_H)],
                         ids=["one-column", "one-full-chunk", "ragged-second-chunk", "qwen3-8b"])
def test_norm_quantize_launches_a_program_per_row_and_column_chunk(hidden, programs, residual):
    call = rmsnorm_quantize_launch_spec(7, hidden, 1e-6, 3, residual=residual)
    assert call.grid == (7, programs)
    assert dict(call.constexprs)["HAS_RESIDUAL"] is residual


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", CHUNKS)
def test_column_parallel_norm_quantized_equals_norm_then_quantize(dtype, hidden):
    x = _randn(2, hidden, dtype=dtype, seed=hidden)
    weight = _randn(hidden, dtype=dtype, seed=11, scale=0.5) + 1
    scales = _scales(3)
    normed = rms_norm(x, weight, 1e-6)
    for q, s in zip(rms_norm_quantized_stacked(x, weight, 1e-6, scales), scales):
        assert torch.equal(_bytes(q), _bytes(quantize_fp8(normed, s)))


def _residual_operands(rows, hidden, dtype, seed):
    """x and a delta on another scale, so their sum rounds (and sometimes cancels)."""
    x = _randn(rows, hidden, dtype=dtype, seed=seed, scale=4.0)
    delta = _randn(rows, hidden, dtype=dtype, seed=seed + 1, scale=0.3)
    weight = _randn(hidden, dtype=dtype, seed=seed + 2, scale=0.5) + 1
    return x, delta, weight


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", CHUNKS)
def test_add_norm_sum_equals_torch_add(dtype, hidden):
    x, delta, weight = _residual_operands(2, hidden, dtype, seed=hidden)
    summed, _ = add_rms_norm_quantized_stacked(x, delta, weight, 1e-6, _scales(1))
    assert summed.dtype == dtype and torch.equal(_bytes(summed), _bytes(x + delta))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", CHUNKS)
@pytest.mark.parametrize("outputs", [1, 3], ids=lambda n: f"{n}-scales")
def test_add_norm_quantized_equals_add_then_norm_then_quantize(dtype, hidden, outputs):
    x, delta, weight = _residual_operands(2, hidden, dtype, seed=hidden + 1)
    scales = _scales(outputs)
    _, stacked = add_rms_norm_quantized_stacked(x, delta, weight, 1e-6, scales)
    normed = rms_norm(x + delta, weight, 1e-6)
    assert stacked.shape == (outputs, *x.shape) and stacked.dtype == torch.float8_e4m3fn
    for q, s in zip(stacked, scales):
        assert torch.equal(_bytes(q), _bytes(quantize_fp8(normed, s)))


def test_add_norm_leaves_x_alone_and_returns_a_new_sum():
    x, delta, weight = _residual_operands(2, 48, torch.bfloat16, seed=20)
    before = x.clone()
    summed, _ = add_rms_norm_quantized_stacked(x, delta, weight, 1e-6, _scales(1))
    assert torch.equal(x, before)
    assert summed.data_ptr() not in (x.data_ptr(), delta.data_ptr())


def test_add_norm_keeps_leading_dimensions():
    x, delta, weight = _residual_operands(6, 32, torch.bfloat16, seed=21)
    summed, stacked = add_rms_norm_quantized_stacked(
        x.reshape(2, 3, 32), delta.reshape(2, 3, 32), weight, 1e-6, _scales(2))
    flat_summed, flat_stacked = add_rms_norm_quantized_stacked(x, delta, weight, 1e-6, _scales(2))
    assert summed.shape == (2, 3, 32) and stacked.shape == (2, 2, 3, 32)
    assert torch.equal(_bytes(summed.reshape(6, 32)), _bytes(flat_summed))
    assert torch.equal(_bytes(stacked.reshape(2, 6, 32)), _bytes(flat_stacked))


def test_add_norm_reads_strided_rows():
    """x and delta may be row slices of wider buffers (their own row strides)."""
    x, delta, weight = _residual_operands(3, 40, torch.bfloat16, seed=22)
    wide_x = torch.zeros(3, 72, dtype=torch.bfloat16)
    wide_delta = torch.zeros(3, 56, dtype=torch.bfloat16)
    wide_x[:, 8:48], wide_delta[:, :40] = x, delta
    strided = add_rms_norm_quantized_stacked(wide_x[:, 8:48], wide_delta[:, :40], weight, 1e-6,
                                             _scales(2))
    dense = add_rms_norm_quantized_stacked(x, delta, weight, 1e-6, _scales(2))
    assert torch.equal(_bytes(strided[0]), _bytes(dense[0]))
    assert torch.equal(_bytes(strided[1]), _bytes(dense[1]))


def test_add_norm_row_is_the_same_whatever_else_is_in_the_call():
    x, delta, weight = _residual_operands(9, BLOCK_H + 16, torch.bfloat16, seed=23)
    summed, stacked = add_rms_norm_quantized_stacked(x, delta, weight, 1e-6, _scales(2))
    for row in (0, 8):
        one_sum, one_stacked = add_rms_norm_quantized_stacked(
            x[row:row + 1], delta[row:row + 1], weight, 1e-6, _scales(2))
        assert torch.equal(_bytes(summed[row:row + 1]), _bytes(one_sum))
        assert torch.equal(_bytes(stacked[:, row:row + 1]), _bytes(one_stacked))


@pytest.mark.parametrize("delta,error,match", [
    ([[1.0] * 16], TypeError, "delta must be a torch.Tensor"),
    (torch.ones(2, 16, dtype=torch.bfloat16), ValueError, r"delta must have x's shape \(1, 16\)"),
    (torch.ones(1, 16, dtype=torch.float16), ValueError, "dtype torch.bfloat16"),
    (torch.ones(1, 32, dtype=torch.bfloat16)[:, ::2], ValueError,
     "delta must be contiguous along its last dimension"),
], ids=["not-a-tensor", "other-shape", "other-dtype", "strided-last-dimension"])
def test_add_norm_refuses_a_bad_delta(delta, error, match):
    with pytest.raises(error, match=match):
        add_rms_norm_quantized_stacked(torch.ones(1, 16, dtype=torch.bfloat16), delta,
                                       torch.ones(16, dtype=torch.bfloat16), 1e-6, _scales(1))


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 7, 300], ids=lambda r: f"T{r}")
def test_add_norm_quantized_on_gpu(rows):
    """Compiled kernel at Qwen3-8B's hidden width: the sum is torch's on CUDA, the quantized
    norms those of the unfused add, norm and quantizations."""
    x = _randn(rows, 4096, dtype=torch.bfloat16, seed=rows, scale=4.0).cuda()
    delta = _randn(rows, 4096, dtype=torch.bfloat16, seed=rows + 1, scale=0.3).cuda()
    weight = (_randn(4096, dtype=torch.bfloat16, seed=2) + 1).cuda()
    scales = [s.cuda() for s in _scales(3)]
    summed, stacked = add_rms_norm_quantized_stacked(x, delta, weight, 1e-6, scales)
    assert torch.equal(_bytes(summed), _bytes(x + delta))
    normed = rms_norm(x + delta, weight, 1e-6)
    for q, s in zip(stacked, scales):
        assert torch.equal(_bytes(q), _bytes(quantize_fp8(normed, s)))


# ------------------------------------------------ silu(gate) * up quantized in one launch
#
# silu_mul_quantized is byte for byte quantize_fp8(F.silu(gate) * up, scale). torch's silu
# takes an exp, which no CPU computes as CUDA's expf does (its core is the ex2.approx
# instruction): on the CPU the interpreter evaluates libdevice's exp correctly rounded
# (platform.gpu_faithful_interpreter), and torch's CPU silu agrees with that after rounding
# to bf16/fp16 for every bf16 and fp16 input, so the CPU checks below are exhaustive and
# exact. The GPU tests check the exp itself against torch on CUDA, every gate value too.

E4M3_NAN_BYTES = (0x7F, 0xFF)
# numpy's warnings for IEEE results the tests ask for on purpose (inf * x, inf / inf, ...).
IEEE_SPECIALS = pytest.mark.filterwarnings(
    "ignore:(overflow|invalid value) encountered:RuntimeWarning")


def _nan_sign_dropped(q: torch.Tensor) -> torch.Tensor:
    """q's bytes with e4m3fn's two NaN encodings taken as one: the sign of a NaN is no part
    of the CPU contract. torch's CPU bf16 conversion writes every NaN as 0xffff in its
    vectorised loop and 0x7fc0 in its scalar tail; a GPU writes 0x7fff, so there the tests
    compare raw bytes."""
    return torch.where(_bytes(q) == E4M3_NAN_BYTES[1], E4M3_NAN_BYTES[0], _bytes(q))


def _wide_range(rows, width, dtype, seed):
    """Both signs, magnitudes log-uniform in [2**-24, 2**8): subnormal fp16, silu's linear
    and saturated regions, and |x| > 88.7, where exp(-x) overflows to inf (silu -0.0)."""
    g = torch.Generator().manual_seed(seed)
    exponent = torch.rand(rows, width, generator=g) * 32 - 24
    sign = torch.randint(0, 2, (rows, width), generator=g) * 2 - 1
    return (sign * torch.exp2(exponent)).to(dtype)


def _gate_up(rows, width, dtype, seed):
    """gate and up as the model has them: the two column halves of one (rows, 2 * width)
    gate|up GEMM output (row stride 2 * width)."""
    gate_up = torch.cat([_wide_range(rows, width, dtype, seed),
                         _randn(rows, width, dtype=dtype, seed=seed + 1, scale=2.0)], dim=1)
    return gate_up[:, :width], gate_up[:, width:]


def _silu_product_then_quantize(gate, up, scale):
    return quantize_fp8(torch.nn.functional.silu(gate) * up, scale)


@pytest.mark.parametrize("silu", [False, True], ids=["product", "silu-product"])
def test_silu_is_a_constexpr_of_the_product_launch(silu):
    call = mul_quantize_launch_spec(7, 1100, silu_a=silu)
    assert dict(call.constexprs)["SILU_A"] is silu and call.grid == (7, 2)
    # libdevice's non-flush-to-zero expf: the one nvcc (-ftz=false) builds torch's silu with.
    assert dict(call.options)["enable_reflect_ftz"] is False


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 16), (4, 1100)], ids=["one-row", "block-tail"])
@pytest.mark.parametrize("scale", SCALES, ids=lambda s: f"scale-{s}")
def test_silu_mul_quantized_equals_silu_then_product_then_quantize(dtype, rows, width, scale):
    gate, up = _gate_up(rows, width, dtype, seed=rows)
    scale = torch.tensor([scale])
    q = silu_mul_quantized(gate, up, scale)
    assert q.dtype == torch.float8_e4m3fn and q.shape == gate.shape
    assert torch.equal(_bytes(q), _bytes(_silu_product_then_quantize(gate, up, scale)))


@IEEE_SPECIALS
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("up_kind", ["ones", "random"], ids=["silu-itself", "times-random-up"])
def test_silu_mul_quantized_for_every_gate_value(dtype, up_kind):
    """All 2**16 bit patterns as gate: subnormals, +-0, +-inf (silu(-inf) is NaN), NaNs."""
    gate = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype).reshape(64, -1)
    up = (torch.ones_like(gate) if up_kind == "ones"
          else _randn(*gate.shape, dtype=dtype, seed=9, scale=2.0))
    scale = torch.tensor([SCALES[0]])
    assert torch.equal(_nan_sign_dropped(silu_mul_quantized(gate, up, scale)),
                       _nan_sign_dropped(_silu_product_then_quantize(gate, up, scale)))


def test_a_silu_one_ulp_off_is_caught(monkeypatch):
    """Positive control for the checks above: numpy's fp32 exp puts silu(-0.7138671875)
    one fp16 ulp (2**-13) off torch's. At a scale putting the two values either side of an
    e4m3 rounding midpoint (8.5), a kernel taking that exp gives another byte, and the
    libdevice exp the kernel calls does not."""
    import numpy as np
    from triton.language.extra import libdevice

    gate = torch.tensor([[-0.7138671875]], dtype=torch.float16)
    up = torch.ones_like(gate)
    midpoint = (0.2347412109375 + 0.234619140625) / 2   # |torch's silu| and numpy's
    scale = torch.tensor([midpoint / 8.5])
    expected = _bytes(_silu_product_then_quantize(gate, up, scale))
    assert torch.equal(_bytes(silu_mul_quantized(gate, up, scale)), expected)

    correctly_rounded = libdevice.exp

    def numpy_fp32_exp(x, _semantic=None):
        out = correctly_rounded(x)
        out.handle.data[...] = np.exp(x.handle.data)
        return out

    monkeypatch.setattr(libdevice, "exp", numpy_fp32_exp)
    assert not torch.equal(_bytes(silu_mul_quantized(gate, up, scale)), expected)


def test_silu_mul_quantized_reads_gate_and_up_where_they_lie():
    """The halves of one gate|up tensor go to the kernel as they are (no copy), with the
    whole tensor's row stride, and give the bytes of contiguous copies."""
    gate, up = _gate_up(3, 40, torch.bfloat16, seed=30)
    bound = []

    def recording(kernel, call, args, keywords):
        bound.append(dict(zip((name for name, _ in call.args), args)))
        return run_kernel(kernel, call, args, keywords)

    scale = _scales(1)[0]
    q = silu_mul_quantized(gate, up, scale, launcher=recording)
    (args,) = bound
    assert (args["a_ptr"].data_ptr(), args["b_ptr"].data_ptr()) == (gate.data_ptr(),
                                                                    up.data_ptr())
    assert args["stride_am"] == args["stride_bm"] == 80
    assert torch.equal(_bytes(q), _bytes(silu_mul_quantized(gate.contiguous(),
                                                            up.contiguous(), scale)))


def test_silu_mul_quantized_keeps_leading_dimensions():
    gate, up = _gate_up(6, 24, torch.bfloat16, seed=31)
    q = silu_mul_quantized(gate.reshape(2, 3, 24), up.reshape(2, 3, 24), _scales(1)[0])
    assert q.shape == (2, 3, 24)
    assert torch.equal(_bytes(q.reshape(6, 24)),
                       _bytes(silu_mul_quantized(gate, up, _scales(1)[0])))


@IEEE_SPECIALS
@pytest.mark.parametrize("gate_value,up_value,nan", [
    (float("nan"), 1.0, True), (1.0, float("nan"), True),
    (float("-inf"), 1.0, True),    # -inf / (1 + exp(inf)) = -inf / inf
    (float("inf"), 1.0, False),    # inf / 1, saturated to 448
    (-100.0, 1.0, False),          # exp(100) overflows: -100 / inf = -0.0
], ids=["nan-gate", "nan-up", "minus-inf-gate", "inf-gate", "exp-overflow"])
def test_silu_mul_quantized_nan_in_gives_nan_out(gate_value, up_value, nan):
    gate = torch.ones(2, 16, dtype=torch.bfloat16)
    up = torch.ones_like(gate)
    gate[1, 3], up[1, 3] = gate_value, up_value
    q = silu_mul_quantized(gate, up, _scales(1)[0]).float()
    assert bool(torch.isnan(q[1, 3])) is nan and not torch.isnan(q[0]).any()


@pytest.mark.parametrize("gate,up,error,match", [
    (torch.ones(2, 16), torch.ones(2, 16), TypeError, "gate must have dtype bfloat16"),
    (torch.ones(2, 16, dtype=torch.bfloat16), [1.0], TypeError, "up must be a torch.Tensor"),
    (torch.ones(2, 16, dtype=torch.bfloat16), torch.ones(2, 8, dtype=torch.bfloat16),
     ValueError, r"up must have gate's shape \(2, 16\)"),
    (torch.ones(2, 16, dtype=torch.bfloat16), torch.ones(2, 16, dtype=torch.float16),
     ValueError, "up must have gate's shape .* and dtype torch.bfloat16"),
    (torch.ones(2, 32, dtype=torch.bfloat16)[:, ::2], torch.ones(2, 16, dtype=torch.bfloat16),
     ValueError, "gate must be contiguous along its last dimension"),
], ids=["fp32-gate", "up-not-a-tensor", "other-shape", "other-dtype", "strided-columns"])
def test_silu_mul_quantized_refuses_bad_operands(gate, up, error, match):
    with pytest.raises(error, match=match):
        silu_mul_quantized(gate, up, torch.tensor([0.1]))


def _gpu_gate_up(rows, width, dtype, seed):
    gate, up = _gate_up(rows, width, dtype, seed)
    gate_up = torch.cat([gate, up], dim=1).cuda()
    # Row 0 opens with the special values (NaN compared as raw bytes: canonical on a GPU).
    specials = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 88.0,
                             -88.0, 89.0, -89.0, -90.0, 104.0, -104.0], dtype=dtype)
    gate_up[0, :specials.numel()] = specials.cuda()
    return gate_up[:, :width], gate_up[:, width:]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 7, 300], ids=lambda r: f"T{r}")
def test_silu_mul_quantized_on_gpu(rows, dtype):
    """Compiled kernel at Qwen3-8B's intermediate width (12288), gate and up the halves of
    one gate|up output as the model has them: torch's silu, product and quantization on
    CUDA, byte for byte."""
    gate, up = _gpu_gate_up(rows, 12288, dtype, seed=rows)
    for scale in (s.cuda() for s in _scales(3)):
        assert torch.equal(_bytes(silu_mul_quantized(gate, up, scale)),
                           _bytes(_silu_product_then_quantize(gate, up, scale)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_quantized_on_gpu_for_every_gate_value(dtype):
    """CUDA's expf and libdevice's, compared through silu on all 2**16 gate bit patterns."""
    gate = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype).reshape(64, -1)
    gate = gate.cuda()
    for up in (torch.ones_like(gate),
               _randn(*gate.shape, dtype=dtype, seed=9, scale=2.0).cuda()):
        for scale in (s.cuda() for s in _scales(3)):
            assert torch.equal(_bytes(silu_mul_quantized(gate, up, scale)),
                               _bytes(_silu_product_then_quantize(gate, up, scale)))
