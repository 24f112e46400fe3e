"""Bad input to the public ops raises a clear error naming the argument."""

import pytest
import torch

from det_suite.ops import fp8_linear, fp8_scaled_mm, quantize_fp8, resolve_weight
from det_suite.models.synthetic_linear import make_fp8_linear

K, N = 128, 64


@pytest.fixture
def layer():
    return make_fp8_linear(N, K)


@pytest.fixture
def x():
    return torch.randn(4, K, dtype=torch.bfloat16)


def call(x, layer, **overrides):
    kwargs = dict(weight=layer.weight, weight_scale=layer.weight_scale,
                  input_scale=layer.input_scale, bias=layer.bias)
    kwargs.update(overrides)
    return fp8_linear(x, **kwargs)


@pytest.mark.parametrize("override,exc,match", [
    (dict(weight=torch.randn(N, K)), TypeError, "weight must have dtype float8_e4m3fn"),
    (dict(weight=torch.zeros(N, K + 1, dtype=torch.float8_e4m3fn)), ValueError,
     r"weight K dimension is 129 \(layout 'nk'\) but x's last dimension is K=128"),
    (dict(weight=torch.zeros(N, K, 1, dtype=torch.float8_e4m3fn)), ValueError, "weight must be 2-D"),
    (dict(weight_scale=torch.ones(2)), ValueError, "weight_scale must hold exactly one element"),
    (dict(input_scale=torch.ones(1, 1, 1)), ValueError, "input_scale must hold exactly one element"),
    (dict(weight_scale=torch.tensor(1.0, dtype=torch.float64)), TypeError,
     "weight_scale must have dtype float32"),
    (dict(input_scale=torch.tensor(float("nan"))), ValueError, "input_scale must be finite and positive"),
    (dict(weight_scale=torch.tensor(float("inf"))), ValueError, "weight_scale must be finite"),
    (dict(input_scale=torch.tensor(0.0)), ValueError, "input_scale must be finite and positive"),
    (dict(input_scale=torch.tensor(-1.0)), ValueError, "input_scale must be finite and positive"),
    (dict(bias=torch.zeros(N + 1, dtype=torch.bfloat16)), ValueError, r"bias must have shape \(64,\)"),
    (dict(bias=torch.zeros(1, N, dtype=torch.bfloat16)), ValueError, r"bias must have shape \(64,\)"),
    (dict(bias=torch.zeros(N, dtype=torch.int32)), TypeError, "bias must have dtype"),
    (dict(weight_layout="row"), ValueError, "weight_layout must be"),
    (dict(num_stages=9), ValueError, "num_stages=9 is not supported"),
    (dict(weight_scale=1.0), TypeError, "weight_scale must be a torch.Tensor"),
], ids=["weight-not-fp8", "weight-k-mismatch", "weight-3d", "multi-element-weight-scale",
        "3d-input-scale", "float64-scale", "nan-input-scale", "inf-weight-scale",
        "zero-input-scale", "negative-input-scale", "bias-wrong-length", "bias-2d",
        "bias-int", "unknown-layout", "unsupported-stages", "scale-not-tensor"])
def test_bad_argument_is_named(x, layer, override, exc, match):
    with pytest.raises(exc, match=match):
        call(x, layer, **override)


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float8_e4m3fn, torch.int8],
                         ids=["fp32", "fp8", "int8"])
def test_activation_dtype_must_be_bf16_or_fp16(layer, x_dtype):
    x = torch.zeros(4, K).to(x_dtype)
    with pytest.raises(TypeError, match="x must have dtype bfloat16, float16"):
        call(x, layer)


def test_weight_whose_n_equals_k_is_not_silently_transposed(layer):
    """x's K (64) equals the [64, 128] weight's N: K is still the unit-stride dimension."""
    x = torch.randn(4, N, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="weight K dimension is 128 .* K=64"):
        call(x, layer)


def test_weight_without_unit_stride_needs_explicit_layout():
    w = torch.zeros(K, 2 * K, dtype=torch.float8_e4m3fn)[:, ::2]
    with pytest.raises(ValueError, match="pass weight_layout='nk' or 'kn'"):
        resolve_weight(w, K)


@pytest.mark.parametrize("layout,stride_one_dim", [("nk", 1), ("kn", 0)])
def test_square_weight_layout_follows_the_unit_stride(layout, stride_one_dim):
    base = torch.zeros(K, K, dtype=torch.float8_e4m3fn)
    w = base if layout == "nk" else base.t()
    assert w.stride(stride_one_dim) == 1
    kn = resolve_weight(w, K)
    assert kn.stride(0) == 1  # K is contiguous in the (K, N) view either way


def test_explicit_kn_layout_accepts_a_row_major_kn_weight():
    w = torch.zeros(K, N, dtype=torch.float8_e4m3fn)
    assert resolve_weight(w, K, "kn").shape == (K, N)


def test_zero_size_k_is_rejected(layer):
    with pytest.raises(ValueError, match="K must be >= 1"):
        call(torch.zeros(4, 0, dtype=torch.bfloat16), layer)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to mix devices")
def test_tensors_on_different_devices_are_rejected(x, layer):
    with pytest.raises(ValueError, match="all tensors must be on one device"):
        call(x.cuda(), layer)


def test_meta_tensors_on_different_devices_are_rejected(layer):
    x = torch.zeros(4, K, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="all tensors must be on one device"):
        call(x, layer)


def test_quantize_rejects_non_2d(layer):
    with pytest.raises(ValueError, match=r"x must be 2-D \(M, K\)"):
        quantize_fp8(torch.zeros(2, 3, K, dtype=torch.bfloat16), layer.input_scale)


def test_scaled_mm_rejects_unquantized_activations(layer):
    with pytest.raises(TypeError, match="a must have dtype float8_e4m3fn"):
        fp8_scaled_mm(torch.zeros(4, K, dtype=torch.bfloat16), layer.weight, layer.input_scale,
                      layer.weight_scale)


def test_scaled_mm_rejects_fp32_output(layer):
    a = torch.zeros(4, K, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="out_dtype must be bfloat16 or float16"):
        fp8_scaled_mm(a, layer.weight, layer.input_scale, layer.weight_scale,
                      out_dtype=torch.float32)
