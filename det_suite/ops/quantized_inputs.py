"""Producers that hand FP8 linears their inputs already quantized.

A decoder layer quantizes every linear's input with its static input scale before the GEMM
(`fp8_linear`: one quantization launch per linear). Where the input is made by a norm or by
the gated MLP's product, that producer can quantize it in the same pass:

- `rms_norm_quantized(x, weight, eps, scales)`: the layer norm feeding q/k/v or gate/up,
  one FP8 tensor per input scale;
- `mul_quantized(a, b, scale)`: silu(gate) * up feeding the down projection.

Each result is byte for byte `quantize_fp8(<the unfused op's output>, scale)` (the fused
kernels share the norm's row arithmetic and the quantization's definition), so a linear fed
a `QuantizedInput` through `linear_on_quantized` gives `fp8_linear`'s bits. Arguments are
checked like the other ops' (ValueError / TypeError naming the argument).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from det_suite.kernels import registry
from det_suite.ops.bi_launch_spec import (MAX_QUANTIZED_OUTPUTS, mul_quantize_launch_spec,
                                          rmsnorm_quantize_launch_spec)
from det_suite.ops.launch import Launcher, run_kernel
from det_suite.ops.linear import fp8_scaled_mm
from det_suite.ops.validation import (ACTIVATION_DTYPES, FP8_DTYPE, require_dtype,
                                      require_same_device, require_tensor, validate_scale)


@dataclass(frozen=True)
class QuantizedInput:
    """A linear's input quantized with `scale` (the linear's input scale): q (..., K) fp8;
    `dtype` is the activation dtype the linear returns."""

    q: torch.Tensor
    scale: torch.Tensor
    dtype: torch.dtype


def _launch(call, tensors: dict, launcher: Launcher) -> None:
    launcher(registry.kernel(call.kernel), call, call.bind(tensors), call.keywords())


def _contiguous_rows(x: torch.Tensor, name: str) -> torch.Tensor:
    if x.dim() < 1:
        raise ValueError(f"{name} must have at least one dimension; got a 0-d tensor")
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous along its last dimension; got strides "
                         f"{x.stride()}")
    return x.reshape(-1, x.shape[-1])


def rms_norm_quantized(x, weight, eps: float, scales: Sequence[torch.Tensor], *,
                       launcher: Launcher = run_kernel) -> list[torch.Tensor]:
    """`quantize_fp8(rms_norm(x, weight, eps), s)` for each s in `scales` (1 to 3), from one
    launch. x (..., H) bf16/fp16, weight (H,); each result (..., H) float8_e4m3fn."""
    x = require_tensor(x, "x")
    weight = require_tensor(weight, "weight")
    require_dtype(x, "x", ACTIVATION_DTYPES)
    require_dtype(weight, "weight", ACTIVATION_DTYPES + (torch.float32,))
    if x.dim() < 1 or weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must be (H,) with H = x's last dimension; got weight "
                         f"{tuple(weight.shape)} for x {tuple(x.shape)}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0.0:
        raise ValueError(f"eps must be a non-negative float; got {eps!r}")
    scales = list(scales)
    if not 1 <= len(scales) <= MAX_QUANTIZED_OUTPUTS:
        raise ValueError(f"scales: expected 1 to {MAX_QUANTIZED_OUTPUTS} input scales, got "
                         f"{len(scales)}")
    scales = [validate_scale(s, f"scales[{i}]") for i, s in enumerate(scales)]
    require_same_device({"x": x, "weight": weight,
                         **{f"scales[{i}]": s for i, s in enumerate(scales)}})
    if weight.shape[0] > 1 and weight.stride(0) != 1:
        raise ValueError(f"weight must be contiguous; got stride {weight.stride()}")
    rows = _contiguous_rows(x, "x")
    m, h = rows.shape
    outs = [torch.empty((m, h), dtype=FP8_DTYPE, device=x.device) for _ in scales]
    if m and h:
        call = rmsnorm_quantize_launch_spec(m, h, float(eps), len(scales))
        tensors = dict(x=rows, weight=weight)
        tensors.update({f"q{i}": q for i, q in enumerate(outs)})
        tensors.update({f"scale{i}": s for i, s in enumerate(scales)})
        _launch(call, tensors, launcher)
    return [q.reshape(x.shape) for q in outs]


def mul_quantized(a, b, scale, *, launcher: Launcher = run_kernel) -> torch.Tensor:
    """`quantize_fp8(a * b, scale)` from one launch: a and b (..., N) of one bf16/fp16
    dtype and shape; the result (..., N) float8_e4m3fn."""
    a = require_tensor(a, "a")
    b = require_tensor(b, "b")
    require_dtype(a, "a", ACTIVATION_DTYPES)
    if b.dtype != a.dtype or b.shape != a.shape:
        raise ValueError(f"b must have a's shape {tuple(a.shape)} and dtype {a.dtype}; got "
                         f"{tuple(b.shape)} {b.dtype}")
    scale = validate_scale(scale, "scale")
    require_same_device({"a": a, "b": b, "scale": scale})
    a_rows, b_rows = _contiguous_rows(a, "a"), _contiguous_rows(b, "b")
    m, n = a_rows.shape
    q = torch.empty((m, n), dtype=FP8_DTYPE, device=a.device)
    if m and n:
        _launch(mul_quantize_launch_spec(m, n), dict(a=a_rows, b=b_rows, q=q, scale=scale),
                launcher)
    return q.reshape(a.shape)


def linear_on_quantized(x: QuantizedInput, weight, weight_scale, input_scale, bias=None, *,
                        num_stages: int | None = None) -> torch.Tensor:
    """`fp8_linear` for an input its producer already quantized: the same GEMM launch on the
    same FP8 operand, so the same bits. `input_scale` must be the scale x was quantized
    with (the very tensor: a different one would scale the product wrongly)."""
    if not isinstance(x, QuantizedInput):
        raise TypeError(f"x must be a QuantizedInput; got {type(x).__name__}")
    if x.scale is not input_scale:
        raise ValueError("x was quantized with another scale than this linear's input_scale")
    lead, k = x.q.shape[:-1], x.q.shape[-1]
    out = fp8_scaled_mm(x.q.reshape(-1, k), weight, input_scale, weight_scale, bias,
                        out_dtype=x.dtype, num_stages=num_stages)
    return out.reshape(*lead, out.shape[-1])
