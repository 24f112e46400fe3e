"""Import the real SGLang wheel on a CPU machine (tox -e sglang-cpu), stubbing only what is
CUDA-only or missing from a CPU install. Every stub is named here:

- `torchvision` (only when it does not import): SGLang's config package imports
  `torchvision.transforms` for vision models at import time. PyPI's torchvision is a CUDA
  build whose ops fail to register under CPU torch; the CI job installs the CPU build, a
  machine without PyTorch's CPU index gets this empty module tree instead. Nothing
  exercised here calls it.
- `sglang.kernels.ops.quantization.fp8_kernel.scaled_fp8_quant`, as imported by
  `sglang.srt.layers.quantization.utils` (requantize_with_max_scale): its static branch is
  a CUDA kernel. The stub quantizes like it does, saturating x / scale to float8_e4m3fn.
- `sglang.srt.layers.quantization.modelopt_quant.apply_fp8_linear`: upstream's CUTLASS /
  `torch._scaled_mm` GEMM, which has no CPU kernel. The stub dequantizes and multiplies in
  float32, so normal mode has an answer to compare routing against; it stands for "not
  det-suite's kernel", never for upstream's numerics.

Everything else is the wheel's own code: the plugin registry, the ModelOpt config and
linear method, the logprob processor, the argument parser and the request contract.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

import pytest
import torch

TOX_HINT = "run `tox -e sglang-cpu` (installs the real sglang wheel with CPU torch)"


class _Anything(types.ModuleType):
    """A module whose every attribute is a harmless placeholder (a class, so subclassing
    and isinstance checks at import time work)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *a, **k: None,
                                "__call__": lambda self, *a, **k: None})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if name == self.root or name.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Anything(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _stub_torchvision() -> None:
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # noqa: BLE001 - missing, or a CUDA build under CPU torch
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    # transformers decides at import whether torchvision is there (find_spec): its image
    # modules are imported first, so they see none, and only SGLang's imports get the stub.
    # A None entry in sys.modules makes find_spec answer None even where a broken build is
    # installed (PyPI's CUDA torchvision beside CPU torch).
    sys.modules["torchvision"] = None
    try:
        for name in ("transformers.image_utils", "transformers.image_transforms",
                     "transformers.image_processing_utils", "transformers.loss.loss_utils"):
            importlib.import_module(name)
    finally:
        del sys.modules["torchvision"]
    sys.meta_path.insert(0, _StubFinder("torchvision"))


def scaled_fp8_quant_stub(input, scale=None, *args, **kwargs):
    assert scale is not None and scale.numel() == 1, "stub: static per-tensor scale only"
    finfo = torch.finfo(torch.float8_e4m3fn)
    out = (input.float() / scale.float()).clamp(finfo.min, finfo.max).to(torch.float8_e4m3fn)
    return out, scale


def apply_fp8_linear_stub(input, weight, weight_scale, input_scale=None, bias=None, **_):
    out = (input.float() @ (weight.float() * weight_scale.float().reshape(1, -1)))
    out = out if bias is None else out + bias.float()
    return out.to(input.dtype)


def import_sglang():
    """The real `sglang`, torchvision stubbed where it cannot import; skips (naming the tox
    env) when the wheel is not installed."""
    if importlib.util.find_spec("sglang") is None:
        pytest.skip(f"sglang is not installed; {TOX_HINT}")
    _stub_torchvision()
    return importlib.import_module("sglang")


def stub_cuda_kernels(monkeypatch) -> None:
    """The two CUDA-only kernels above, replaced for one test."""
    import_sglang()
    utils = importlib.import_module("sglang.srt.layers.quantization.utils")
    modelopt = importlib.import_module("sglang.srt.layers.quantization.modelopt_quant")
    monkeypatch.setattr(utils, "scaled_fp8_quant", scaled_fp8_quant_stub)
    monkeypatch.setattr(modelopt, "apply_fp8_linear", apply_fp8_linear_stub)
