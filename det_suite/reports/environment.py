"""What produced a result: machine, GPU, software stack and det-suite's own source, captured
once per report by every command.

The one place that gathers it: `environment()` for a results file, built from
`package_versions()` (the whole software stack, read from package metadata without importing
anything heavy) and `gpu_details()` (the GPU as torch and NVML see it: name, capability,
driver, CUDA driver, enforced power limit). NVML comes through nvidia-ml-py when it is
installed; without it, or without a GPU, the fields say why they are missing instead of
guessing.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform

# (label, distribution names to try): the first installed one answers. Triton ships as
# pytorch-triton in nightly wheels, sgl-kernel was renamed sglang-kernel, flashinfer's PyPI
# name is flashinfer-python.
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
NO_CUDA = "no CUDA device"


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
        raise NvmlUnavailable(NO_CUDA)
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


def cuda_driver_text(version) -> str | None:
    """NVML's CUDA driver version as an int (12080) -> '12.8'; a string passes through."""
    if isinstance(version, bool) or not isinstance(version, int):
        return version
    return f"{version // 1000}.{version % 1000 // 10}"


def _nvml_fields(nvml, handle) -> dict:
    """What NVML knows that torch does not; a field NVML cannot read here is None (an old
    driver lacks some calls, a VM hides the power limit)."""
    out = {}
    # Each read is looked up when called, so a call this nvidia-ml-py lacks costs one field.
    for key, call in (("driver", lambda: nvml.nvmlSystemGetDriverVersion()),
                      ("cuda_driver", lambda: nvml.nvmlSystemGetCudaDriverVersion_v2()),
                      ("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3),
                      ("nvml_name", lambda: nvml.nvmlDeviceGetName(handle))):
        try:
            value = call()
        except (nvml.NVMLError, AttributeError):
            value = None
        out[key] = value.decode() if isinstance(value, bytes) else value
    out["cuda_driver"] = cuda_driver_text(out["cuda_driver"])
    return out


def gpu_details(device_index: int = 0) -> dict:
    """Name, capability, SM count, memory, torch's CUDA and, through NVML, driver, CUDA
    driver and enforced power limit of a CUDA device. {"available": False, "reason": ...}
    without one; "nvml": False with "nvml_reason" where NVML cannot say."""
    import torch

    if not torch.cuda.is_available():
        return {"available": False, "reason": NO_CUDA}
    props = torch.cuda.get_device_properties(device_index)
    out = {"available": True, "name": props.name,
           "capability": f"{props.major}.{props.minor}",
           "multiprocessors": props.multi_processor_count,
           "memory_gib": round(props.total_memory / 2**30, 1),
           "torch_cuda": torch.version.cuda}
    try:
        nvml, handle, how = nvml_handle(device_index)
    except NvmlUnavailable as exc:
        return {**out, "nvml": False, "nvml_reason": str(exc)}
    return {**out, "nvml": True, "matched_by": how, **_nvml_fields(nvml, handle)}


def git_revision() -> str | None:
    """The revision a result names: DET_SUITE_REVISION when the sender set it, else
    '<commit>' for a clean tree or '<commit>+diff.<hash>' (det_suite.reports.provenance)."""
    from det_suite.reports.provenance import revision

    return revision()["revision"]


def environment() -> dict:
    """What produced a result: machine, GPU (gpu_details), software stack
    (package_versions), det-suite source."""
    import torch
    import triton

    from det_suite import __version__
    from det_suite.platform.family import device_family, family_source
    from det_suite.platform.interpreter import interpreter_active
    from det_suite.reports.provenance import revision, source_hashes, tree_sha256

    hashes = source_hashes()
    rev = revision()  # runs git a few times: once per report, not per field
    cuda = torch.cuda.is_available()
    interpreted = interpreter_active()
    env = {
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton.__version__,
        "det_suite": __version__,
        "git_revision": rev["revision"],
        "revision": rev,
        "triton_interpret": interpreted,
        "cuda_available": cuda,
        # No GPU and no interpreter: no kernel can run, so no tile table is in play.
        "tile_family": device_family() if cuda or interpreted else None,
        "tile_family_source": family_source(),
        "packages": package_versions(),
        "source_sha256": hashes,
        "source_tree_sha256": tree_sha256(hashes),
    }
    if cuda and not interpreted:
        env["gpu"] = gpu_details(0)
        env["machine"] = env["gpu"]["name"]
    else:
        # Under the interpreter no kernel runs on a GPU even where one exists, so the
        # result describes the CPU that ran it.
        env["gpu"] = {"available": False,
                      "reason": "Triton interpreter (kernels run on the CPU)" if interpreted
                      else NO_CUDA}
        env["machine"] = (f"CPU ({platform.processor() or platform.machine()})"
                          + (", Triton interpreter" if interpreted else ", no GPU"))
    return env
