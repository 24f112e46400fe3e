"""Argument checks for the public ops: each raises ValueError or TypeError naming the
argument and what was expected, before anything launches. Nothing is silently converted."""

from __future__ import annotations

import math
from typing import Literal

import torch

from det_suite.platform.interpreter import require_kernel_device

ACTIVATION_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPE = torch.float8_e4m3fn
WeightLayout = Literal["auto", "nk", "kn"]


def require_tensor(value, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def require_dtype(t: torch.Tensor, name: str, allowed: tuple[torch.dtype, ...]) -> None:
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"{name} must have dtype {names}; got {str(t.dtype).replace('torch.', '')}")


def require_same_device(tensors: dict[str, torch.Tensor | None]) -> torch.device:
    present = {k: v for k, v in tensors.items() if v is not None}
    devices = {k: v.device for k, v in present.items()}
    first_name, first = next(iter(devices.items()))
    for name, dev in devices.items():
        if dev != first:
            raise ValueError(f"{name} is on {dev} but {first_name} is on {first}; "
                             "all tensors must be on one device")
    require_kernel_device(first_name, first)
    return first


_CHECKED_VERSION_ATTR = "_det_suite_checked_version"


def validate_scale(scale, name: str) -> torch.Tensor:
    """A static per-tensor scale: float32, one element (0-d or shape (1,)), finite, > 0.

    Reading the value needs a device sync, so the check runs once per tensor version and is
    remembered on the tensor: static scales are parameters, and a sync per call would stall
    the launch queue (and is illegal inside CUDA Graph capture). Writing to the scale bumps
    its version and re-arms the check.
    """
    scale = require_tensor(scale, name)
    require_dtype(scale, name, (torch.float32,))
    if scale.numel() != 1 or scale.dim() > 1:
        raise ValueError(f"{name} must hold exactly one element (shape () or (1,)) for a "
                         f"per-tensor scale; got shape {tuple(scale.shape)}")
    _check_values_once(scale, name, "must be finite and positive")
    return scale.reshape(1)


def _check_values_once(scales: torch.Tensor, name: str, requirement: str) -> None:
    """Every value of `scales` finite and > 0, read from the device once per tensor version
    (remembered on the tensor): a scale's check must never sync a replay, and cannot run
    inside CUDA Graph capture at all."""
    if getattr(scales, _CHECKED_VERSION_ATTR, None) == scales._version:
        return
    if scales.is_cuda and torch.cuda.is_current_stream_capturing():
        raise ValueError(f"{name} was not validated before CUDA Graph capture; run the op "
                         "once eagerly (warm-up) before capturing")
    values = scales.reshape(-1).tolist()
    if not all(math.isfinite(v) and v > 0.0 for v in values):
        shown = values[0] if len(values) == 1 else values
        raise ValueError(f"{name} {requirement}; got {shown}")
    setattr(scales, _CHECKED_VERSION_ATTR, scales._version)


def validate_scale_vector(scales, name: str, count: int) -> torch.Tensor:
    """`count` per-tensor scales in one float32 (count,) contiguous tensor (a segmented
    GEMM's, one per segment): each finite and > 0. Checked once per tensor version, like
    `validate_scale`, so a CUDA Graph replay never syncs."""
    scales = require_tensor(scales, name)
    require_dtype(scales, name, (torch.float32,))
    if scales.dim() != 1 or scales.shape[0] != count or scales.stride(0) != 1:
        raise ValueError(f"{name} must be a contiguous ({count},) tensor, one scale per "
                         f"segment; got shape {tuple(scales.shape)}")
    _check_values_once(scales, name, "must all be finite and positive")
    return scales


def resolve_weight(weight, k: int, layout: WeightLayout = "auto") -> torch.Tensor:
    """Return the weight as a (K, N) view whatever its layout.

    "nk": an [N, K] tensor (F.linear's layout). "kn": a (K, N) tensor, e.g. SGLang's
    column-major view `w.t()` of an [N, K] tensor. "auto": K is the dimension with stride 1,
    because FP8 GEMM weights are stored K-contiguous in both conventions; matching by size
    alone would silently transpose a weight whose N happens to equal x's K.
    """
    weight = require_tensor(weight, "weight")
    require_dtype(weight, "weight", (FP8_DTYPE,))
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D ([N, K] or (K, N)); got shape {tuple(weight.shape)}")
    if layout not in ("auto", "nk", "kn"):
        raise ValueError(f"weight_layout must be 'auto', 'nk' or 'kn'; got {layout!r}")
    if layout == "auto":
        if weight.stride(1) == 1:
            layout = "nk"
        elif weight.stride(0) == 1:
            layout = "kn"
        else:
            raise ValueError(f"weight with strides {weight.stride()} has no unit-stride dimension "
                             "to take as K; pass weight_layout='nk' or 'kn' to say which "
                             "dimension is K")
    kn = weight.t() if layout == "nk" else weight
    if kn.shape[0] != k:
        raise ValueError(f"weight K dimension is {kn.shape[0]} (layout {layout!r}) but x's last "
                         f"dimension is K={k}")
    return kn
