"""Producers that hand FP8 linears their inputs already quantized.

A decoder layer quantizes every linear's input with its static input scale before the GEMM
(`fp8_linear`: one quantization launch per linear). Where the input is made by a norm or by
the gated MLP's product, that producer can quantize it in the same pass:

- `rms_norm_quantized(x, weight, eps, scales)`: the layer norm feeding q/k/v or gate/up,
  one FP8 tensor per input scale (`rms_norm_quantized_stacked`: the same as one (S, ..., H)
  buffer, a segmented GEMM's input; `add_rms_norm_quantized_stacked`: with the residual add
  before the norm in the same launch);
- `silu_mul_quantized(gate, up, scale)`: silu(gate) * up feeding the down projection
  (`mul_quantized(a, b, scale)`: a plain product).

Each result is byte for byte `quantize_fp8(<the unfused op's output>, scale)` (the fused
kernels share the norm's row arithmetic and the quantization's definition), so a linear fed
a `QuantizedInput` through `linear_on_quantized` gives `fp8_linear`'s bits. Arguments are
checked like the other ops' (ValueError / TypeError naming the argument). Like theirs, the
launches use programmatic dependent launch on SM90+ (`ops.launch.programmatic_launch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from det_suite.kernels import registry
from det_suite.ops.bi_launch_spec import (MAX_QUANTIZED_OUTPUTS, mul_quantize_launch_spec,
                                          rmsnorm_quantize_launch_spec)
from det_suite.ops.launch import Launcher, programmatic_launch, run_kernel
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
    launch. x (..., H) bf16/fp16, weight (H,); each result (..., H) float8_e4m3fn, a view
    of `rms_norm_quantized_stacked`'s one buffer."""
    return list(rms_norm_quantized_stacked(x, weight, eps, scales, launcher=launcher).unbind(0))


def rms_norm_quantized_stacked(x, weight, eps: float, scales: Sequence[torch.Tensor], *,
                               launcher: Launcher = run_kernel) -> torch.Tensor:
    """`rms_norm_quantized` as one (S, ..., H) tensor, S = len(scales): the stacked input
    a segmented FP8 GEMM (`ops.fp8_scaled_mm_segmented`) reads, one segment per scale."""
    x, weight, scales = _norm_arguments(x, weight, eps, scales)
    require_same_device({"x": x, "weight": weight,
                         **{f"scales[{i}]": s for i, s in enumerate(scales)}})
    rows = _contiguous_rows(x, "x")
    m, h = rows.shape
    stacked = torch.empty((len(scales), m, h), dtype=FP8_DTYPE, device=x.device)
    outs = stacked.unbind(0)
    if m and h:
        call = rmsnorm_quantize_launch_spec(m, h, float(eps), len(scales),
                                            pdl=programmatic_launch(x.device))
        tensors = dict(x=rows, weight=weight)
        tensors.update({f"q{i}": q for i, q in enumerate(outs)})
        tensors.update({f"scale{i}": s for i, s in enumerate(scales)})
        _launch(call, tensors, launcher)
    return stacked.reshape(len(scales), *x.shape)


def mul_quantized(a, b, scale, *, launcher: Launcher = run_kernel) -> torch.Tensor:
    """`quantize_fp8(a * b, scale)` from one launch: a and b (..., N) of one bf16/fp16
    dtype and shape; the result (..., N) float8_e4m3fn."""
    return _product_quantized(a, b, scale, ("a", "b"), silu_a=False, launcher=launcher)


def silu_mul_quantized(gate, up, scale, *, launcher: Launcher = run_kernel) -> torch.Tensor:
    """`quantize_fp8(F.silu(gate) * up, scale)` from one launch, byte for byte as torch
    computes it on CUDA: gate and up (..., I) of one bf16/fp16 dtype and shape, each
    contiguous along I only, so the two column halves of one (..., 2I) gate|up GEMM output
    are read where they lie; the result (..., I) float8_e4m3fn, NaN where silu(gate) * up
    is NaN (silu(-inf) is)."""
    return _product_quantized(gate, up, scale, ("gate", "up"), silu_a=True, launcher=launcher)


def _product_quantized(a, b, scale, names: tuple[str, str], *, silu_a: bool,
                       launcher: Launcher) -> torch.Tensor:
    a_name, b_name = names
    a = require_tensor(a, a_name)
    b = require_tensor(b, b_name)
    require_dtype(a, a_name, ACTIVATION_DTYPES)
    if b.dtype != a.dtype or b.shape != a.shape:
        raise ValueError(f"{b_name} must have {a_name}'s shape {tuple(a.shape)} and dtype "
                         f"{a.dtype}; got {tuple(b.shape)} {b.dtype}")
    scale = validate_scale(scale, "scale")
    require_same_device({a_name: a, b_name: b, "scale": scale})
    a_rows, b_rows = _contiguous_rows(a, a_name), _contiguous_rows(b, b_name)
    m, n = a_rows.shape
    q = torch.empty((m, n), dtype=FP8_DTYPE, device=a.device)
    if m and n:
        call = mul_quantize_launch_spec(m, n, silu_a=silu_a, pdl=programmatic_launch(a.device))
        _launch(call, dict(a=a_rows, b=b_rows, q=q, scale=scale), launcher)
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


def _norm_arguments(x, weight, eps, scales) -> tuple[torch.Tensor, torch.Tensor, list]:
    """(x, weight, scales) checked as a norm feeding FP8 linears takes them."""
    x = require_tensor(x, "x")
    weight = require_tensor(weight, "weight")
    require_dtype(x, "x", ACTIVATION_DTYPES)
    require_dtype(weight, "weight", ACTIVATION_DTYPES + (torch.float32,))
    if x.dim() < 1 or weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must be (H,) with H = x's last dimension; got weight "
                         f"{tuple(weight.shape)} for x {tuple(x.shape)}")
    if weight.shape[0] > 1 and weight.stride(0) != 1:
        raise ValueError(f"weight must be contiguous; got stride {weight.stride()}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0.0:
        raise ValueError(f"eps must be a non-negative float; got {eps!r}")
    scales = list(scales)
    if not 1 <= len(scales) <= MAX_QUANTIZED_OUTPUTS:
        raise ValueError(f"scales: expected 1 to {MAX_QUANTIZED_OUTPUTS} input scales, got "
                         f"{len(scales)}")
    return x, weight, [validate_scale(s, f"scales[{i}]") for i, s in enumerate(scales)]


def add_rms_norm_quantized_stacked(x, delta, weight, eps: float,
                                   scales: Sequence[torch.Tensor], *,
                                   launcher: Launcher = run_kernel
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's residual add and the norm after it, from one launch:
    (summed, stacked) with summed = x + delta as torch computes it (a new tensor: x is left
    alone, a captured graph or the caller may still read it) and stacked =
    `rms_norm_quantized_stacked(summed, weight, eps, scales)`, both byte for byte.
    x and delta (..., H) of one bf16/fp16 dtype and shape; stacked (S, ..., H)."""
    x, weight, scales = _norm_arguments(x, weight, eps, scales)
    delta = require_tensor(delta, "delta")
    if delta.dtype != x.dtype or delta.shape != x.shape:
        raise ValueError(f"delta must have x's shape {tuple(x.shape)} and dtype {x.dtype}; "
                         f"got {tuple(delta.shape)} {delta.dtype}")
    require_same_device({"x": x, "delta": delta, "weight": weight,
                         **{f"scales[{i}]": s for i, s in enumerate(scales)}})
    rows, delta_rows = _contiguous_rows(x, "x"), _contiguous_rows(delta, "delta")
    m, h = rows.shape
    summed = torch.empty((m, h), dtype=x.dtype, device=x.device)
    stacked = torch.empty((len(scales), m, h), dtype=FP8_DTYPE, device=x.device)
    if m and h:
        call = rmsnorm_quantize_launch_spec(m, h, float(eps), len(scales), residual=True,
                                            pdl=programmatic_launch(x.device))
        tensors = dict(x=rows, delta=delta_rows, weight=weight, summed=summed)
        tensors.update({f"q{i}": q for i, q in enumerate(stacked.unbind(0))})
        tensors.update({f"scale{i}": s for i, s in enumerate(scales)})
        _launch(call, tensors, launcher)
    return summed.reshape(x.shape), stacked.reshape(len(scales), *x.shape)
