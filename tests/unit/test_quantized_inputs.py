"""Producers that quantize FP8 linears' inputs in their own pass (`ops.quantized_inputs`):
each result is byte for byte the unfused ops' (the norm or the product, then
`quantize_fp8`), and a linear on it gives `fp8_linear`'s bits. On the CPU interpreter here;
`test_fused_producers_on_gpu` repeats the byte checks with compiled kernels."""

import pytest
import torch

from det_suite.ops import fp8_linear, quantize_fp8
from det_suite.ops.batch_invariant import rms_norm
from det_suite.ops.quantized_inputs import (QuantizedInput, linear_on_quantized, mul_quantized,
                                            rms_norm_quantized)

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
