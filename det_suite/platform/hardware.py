"""What this process can run on: one frozen snapshot, taken once and reused.

The pytest plugin decides skips from it, reports print it. `current()` is cached so the
probe runs once per process; tests replace it (monkeypatch `det_suite.platform.hardware.current`)
to exercise GPU paths on a CPU machine, so callers must look it up through the module at
call time rather than binding the function at import.

Detection never initialises CUDA when `torch.cuda.is_available()` is False: the device
name and capability are read only when a device exists. With several GPUs, the snapshot
describes device 0 (what kernels launch on unless told otherwise; CUDA_VISIBLE_DEVICES
picks which physical GPU that is).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass, field
from functools import lru_cache

from det_suite.platform import family as arch
from det_suite.platform.interpreter import interpreter_active

# Optional packages a marker depends on; find_spec answers without importing them.
OPTIONAL_PACKAGES = ("transformers", "safetensors", "sglang")


@dataclass(frozen=True)
class Snapshot:
    cuda_available: bool
    device_name: str | None
    capability: tuple[int, int] | None
    interpreter_active: bool
    transformers: bool
    safetensors: bool
    sglang: bool
    torch_version: str
    triton_version: str | None
    # Derived from `capability`, never passed: a snapshot cannot disagree with itself.
    family: str | None = field(init=False)

    def __post_init__(self) -> None:
        if self.cuda_available and self.capability is None:
            raise ValueError("capability must be a (major, minor) tuple when "
                             "cuda_available is True; got None")
        family = arch.family_of_capability(*self.capability) if self.capability else None
        object.__setattr__(self, "family", family)

    @property
    def gpu_usable(self) -> bool:
        """A CUDA GPU that kernels actually compile for (not the Triton interpreter)."""
        return self.cuda_available and not self.interpreter_active

    def capability_text(self) -> str:
        return f"{self.capability[0]}.{self.capability[1]}" if self.capability else "none"

    def describe(self) -> str:
        """E.g. 'NVIDIA H200 (9.0)' or 'no CUDA device'."""
        if not self.cuda_available:
            return "no CUDA device"
        return f"{self.device_name} ({self.capability_text()})"

    def has_package(self, name: str) -> bool:
        if name not in OPTIONAL_PACKAGES:
            raise ValueError(f"name={name!r} is not a package the snapshot tracks; "
                             f"expected one of {', '.join(OPTIONAL_PACKAGES)}")
        return getattr(self, name)

    def tile_family(self) -> tuple[str, str]:
        """(family, source) the tile policy resolves to in this process, by the same rule
        as `family.device_family`, read from the snapshot (never touches CUDA, honours a
        substituted snapshot in tests)."""
        return arch.resolve_family(on_cpu=self.interpreter_active or not self.cuda_available,
                                   capability=self.capability)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        # A half-installed package or a module injected without a spec: not usable.
        return False


def _distribution_version(*names: str) -> str | None:
    # Triton ships as "triton" on PyPI and "pytorch-triton" in PyTorch's nightlies.
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def detect() -> Snapshot:
    """Probe the machine now (uncached). Prefer `current()`."""
    import torch

    cuda = torch.cuda.is_available()
    name = torch.cuda.get_device_name(0) if cuda else None
    capability = tuple(torch.cuda.get_device_capability(0)) if cuda else None
    return Snapshot(
        cuda_available=cuda,
        device_name=name,
        capability=capability,
        interpreter_active=interpreter_active(),
        transformers=importable("transformers"),
        safetensors=importable("safetensors"),
        sglang=importable("sglang"),
        torch_version=torch.__version__,
        triton_version=_distribution_version("triton", "pytorch-triton"),
    )


@lru_cache(maxsize=1)
def current() -> Snapshot:
    """The process-wide snapshot (probed on first call)."""
    return detect()


def cuda_available() -> bool:
    """Cheap check used before anything else is decided (no device query)."""
    import torch

    return torch.cuda.is_available()
