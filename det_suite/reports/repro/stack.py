"""The parts of a run's environment `reports.environment.environment()` leaves out: the GPU
as NVML sees it (driver, CUDA driver, enforced power limit) and the versions of the whole
software stack (transformers, sglang, flashinfer, ...), read from package metadata without
importing anything heavy."""

from __future__ import annotations

import importlib.metadata
import platform

# (label, distribution names to try): the first installed one answers.
PACKAGES = (
    ("torch", ("torch",)),
    ("triton", ("triton", "pytorch-triton")),
    ("transformers", ("transformers",)),
    ("tokenizers", ("tokenizers",)),
    ("safetensors", ("safetensors",)),
    ("numpy", ("numpy",)),
    ("sglang", ("sglang",)),
    ("sgl-kernel", ("sglang-kernel", "sgl-kernel")),
    ("flashinfer", ("flashinfer-python", "flashinfer")),
    ("nvidia-ml-py", ("nvidia-ml-py",)),
    ("datasets", ("datasets",)),
    ("matplotlib", ("matplotlib",)),
)


class NvmlUnavailable(RuntimeError):
    """No NVML reading here; the message says why."""


def package_versions() -> dict[str, str | None]:
    """label -> installed version, None where not installed; python included."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for label, names in PACKAGES:
        out[label] = None
        for name in names:
            try:
                out[label] = importlib.metadata.version(name)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def nvml_handle(device_index: int):
    """(pynvml, handle, how it was matched) for CUDA device `device_index`, matched by PCI
    bus id (CUDA's device order need not be NVML's). Raises NvmlUnavailable."""
    import torch

    if not torch.cuda.is_available():
        raise NvmlUnavailable("no CUDA device")
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py is not installed (pip install "
                              f"'det-suite[nvml]'): {exc}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML did not initialise: {exc}") from None
    props = torch.cuda.get_device_properties(device_index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        pci = (f"{getattr(props, 'pci_domain_id', 0):08X}:{bus:02X}:"
               f"{getattr(props, 'pci_device_id', 0):02X}.0")
        try:
            return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(pci), f"PCI bus id {pci}"
        except pynvml.NVMLError:
            pass
    try:
        return (pynvml, pynvml.nvmlDeviceGetHandleByIndex(device_index),
                f"NVML index {device_index} (no PCI bus id from torch)")
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML has no handle for CUDA device {device_index}: "
                              f"{exc}") from None


def gpu_details(device_index: int = 0) -> dict:
    """Name, capability, driver, CUDA driver, enforced power limit of a CUDA device;
    {"available": False, "reason": ...} where there is none or NVML cannot say."""
    import torch

    if not torch.cuda.is_available():
        return {"available": False, "reason": "no CUDA device"}
    props = torch.cuda.get_device_properties(device_index)
    out = {"available": True, "name": props.name,
           "capability": f"{props.major}.{props.minor}", "torch_cuda": torch.version.cuda}
    try:
        nvml, handle, how = nvml_handle(device_index)
    except NvmlUnavailable as exc:
        return {**out, "nvml": False, "nvml_reason": str(exc)}
    out.update(nvml=True, matched_by=how)
    for key, call in (("driver", nvml.nvmlSystemGetDriverVersion),
                      ("cuda_driver", nvml.nvmlSystemGetCudaDriverVersion_v2),
                      ("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3),
                      ("nvml_name", lambda: nvml.nvmlDeviceGetName(handle))):
        try:
            value = call()
        except (nvml.NVMLError, AttributeError):
            value = None
        out[key] = value.decode() if isinstance(value, bytes) else value
    if isinstance(out["cuda_driver"], int):
        v = out["cuda_driver"]
        out["cuda_driver"] = f"{v // 1000}.{v % 1000 // 10}"
    return out
