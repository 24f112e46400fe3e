"""Vendor FP8 GEMMs at the quantized-input level, one call signature for all:

    gemm(a_fp8 (M, K), w_kn (K, N) column-major view, a_scale, w_scale, bias, out_dtype)

`a_scale`/`w_scale` are one-element float32 tensors; `w_kn` is `weight_nk.t()` (SGLang's
layout). Optional vendors are looked up when asked for and fail with an ImportError that
names the missing package and the attribute det-suite expected, so an API change in a new
release is loud rather than a silent fallback.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

from det_suite.platform.hardware import importable

GemmFn = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class VendorGemm:
    name: str
    fn: GemmFn
    description: str


def torch_scaled_mm(a, w_kn, a_scale, w_scale, bias, out_dtype):
    # cuBLASLt per-tensor FP8; the scales must be 0-d or (1, 1)-broadcastable float32.
    return torch._scaled_mm(a, w_kn, scale_a=a_scale.reshape(()), scale_b=w_scale.reshape(()),
                            bias=bias, out_dtype=out_dtype)


def require_attr(module_name: str, attr: str, what: str):
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"{what} needs {module_name!r}, which is not importable: {exc}") from exc
    if not hasattr(module, attr):
        raise ImportError(f"{what}: {module_name}.{attr} not found in the installed version; "
                          "det-suite's integration needs updating for it")
    return getattr(module, attr)


def sglang_fp8_scaled_mm(a, w_kn, a_scale, w_scale, bias, out_dtype):
    fn = require_attr("sgl_kernel", "fp8_scaled_mm", "sglang fp8_scaled_mm")
    return fn(a, w_kn, a_scale.reshape(1, 1).expand(a.shape[0], 1).contiguous(),
              w_scale.reshape(1, 1).expand(w_kn.shape[1], 1).contiguous(), out_dtype, bias)


def flashinfer_bmm_fp8(a, w_kn, a_scale, w_scale, bias, out_dtype):
    fn = require_attr("flashinfer", "bmm_fp8", "flashinfer bmm_fp8")
    out = fn(a.unsqueeze(0), w_kn.unsqueeze(0), a_scale.reshape(()), w_scale.reshape(()),
             out_dtype)
    out = out.squeeze(0)
    return out + bias if bias is not None else out


VENDOR_GEMMS = {
    "torch_scaled_mm": VendorGemm("torch_scaled_mm", torch_scaled_mm,
                                  "torch._scaled_mm, per-tensor scales (cuBLASLt)"),
    "sglang_fp8_scaled_mm": VendorGemm("sglang_fp8_scaled_mm", sglang_fp8_scaled_mm,
                                       "sgl_kernel.fp8_scaled_mm (CUTLASS)"),
    "flashinfer_bmm_fp8": VendorGemm("flashinfer_bmm_fp8", flashinfer_bmm_fp8,
                                     "flashinfer.bmm_fp8 (bias added after, unfused)"),
}
_VENDOR_MODULES = {"sglang_fp8_scaled_mm": "sgl_kernel", "flashinfer_bmm_fp8": "flashinfer"}


def available_vendor_gemms() -> dict[str, VendorGemm]:
    """The vendors usable here: torch always; the others when their package imports."""
    return {name: gemm for name, gemm in VENDOR_GEMMS.items()
            if name not in _VENDOR_MODULES or importable(_VENDOR_MODULES[name])}
