"""Compile jobs: a launch, specialised the way the Triton runtime specialises it at launch,
as plain data a compile worker (`lint.worker`) can take.

Ints equal to 1 become constants and 16-divisible values (and aligned pointers) get a
divisibility hint, as Triton's native specialiser decides on the target's backend, unless
the kernel declares the parameter do_not_specialize(_on_alignment).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from det_suite.lint.standins import KernelLaunch


@dataclass(frozen=True)
class CompileJob:
    """Everything `triton.compile` needs, in plain data (sent to a worker process)."""

    module: str
    attr: str
    capability: int
    signature: tuple[tuple[str, str], ...]   # parameter -> Triton type or "constexpr"
    constexprs: tuple[tuple[str, Any], ...]
    divisible: tuple[str, ...]               # parameters with a divisibility-by-16 hint
    options: tuple[tuple[str, Any], ...]
    positional: tuple[str, ...] = ()         # runtime parameters in the launch's order

    def to_json(self) -> dict:
        return dict(module=self.module, attr=self.attr, capability=self.capability,
                    signature=dict(self.signature), constexprs=dict(self.constexprs),
                    divisible=list(self.divisible), options=dict(self.options),
                    positional=list(self.positional))

    @property
    def key(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


@lru_cache(maxsize=None)
def _backend_class(capability: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    return type(make_backend(GPUTarget("cuda", capability, 32)))


@lru_cache(maxsize=None)
def _kernel_object(module: str, attr: str):
    """The JIT function, for its specialisation flags; None where it cannot be imported
    here (the compile worker then reports the import error itself)."""
    try:
        return getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None


def specialize(launch: KernelLaunch, module: str, attr: str, capability: int) -> CompileJob:
    """Turn a launch into a compile job, specialising runtime arguments exactly as the
    Triton runtime does at launch (its native specialiser, the target's backend)."""
    try:
        from triton._C.libtriton import native_specialize_impl
    except ImportError as exc:  # pragma: no cover - a Triton without it
        raise RuntimeError("this Triton has no native_specialize_impl; det_suite.lint needs "
                           "Triton 3.3+ to mirror launch-time specialisation") from exc

    backend = _backend_class(capability)
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    divisible: list[str] = []
    # Parameters the kernel declares do_not_specialize(_on_alignment) are never specialised
    # by the runtime (e.g. M of the swapped kernel: M == 1 runs the general code).
    params = {p.name: p for p in getattr(_kernel_object(module, attr), "params", ())}
    for name, value in launch.args.items():
        param = params.get(name)
        kind, spec = native_specialize_impl(
            backend, value, False, not getattr(param, "do_not_specialize", False),
            not getattr(param, "do_not_specialize_on_alignment", False))
        if kind == "constexpr":
            signature[name] = "constexpr"
            constexprs[name] = spec
        else:
            signature[name] = kind
            if isinstance(spec, str) and "D" in spec:
                divisible.append(name)
    for name, value in launch.constexprs.items():
        signature[name] = "constexpr"
        constexprs[name] = value
    # Canonical order (the worker orders parameters by the kernel's own signature), so
    # equal launches give equal jobs and cache keys.
    return CompileJob(module=module, attr=attr, capability=capability,
                      signature=tuple(sorted(signature.items())),
                      constexprs=tuple(sorted(constexprs.items())),
                      divisible=tuple(sorted(divisible)),
                      options=tuple(sorted(launch.options.items())),
                      positional=tuple(launch.args))


def call_job(call, launch: KernelLaunch, capability: int) -> CompileJob:
    """The job for a `KernelCall` (named as in `det_suite.kernels.registry`) bound to
    stand-ins."""
    return specialize(launch, call.module, call.kernel, capability)
