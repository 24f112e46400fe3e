"""reports.environment: one place gathers what produced a result. Package versions from
package metadata, the GPU from torch and NVML (driver, CUDA driver, enforced power limit),
and on a machine without a GPU or without NVML, fields that say why instead of a guess."""

import importlib.metadata
import platform
import sys
import types

import pytest
import torch

from det_suite.reports import environment as envmod
from det_suite.reports.repro import stack

H200 = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                             total_memory=150_110_011_392, pci_bus_id=0x1B, pci_domain_id=0,
                             pci_device_id=0)


class FakeNvmlError(Exception):
    pass


def fake_pynvml(*, init_fails=False, by_pci=True, missing=()):
    """An NVML module as nvidia-ml-py exposes it; `missing` names calls this driver lacks."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = FakeNvmlError
    nvml.seen_pci = []

    def init():
        if init_fails:
            raise FakeNvmlError("Driver Not Loaded")

    def handle_by_pci(pci):
        nvml.seen_pci.append(pci)
        if not by_pci:
            raise FakeNvmlError("Not Found")
        return "handle-pci"

    calls = {"nvmlInit": init, "nvmlDeviceGetHandleByPciBusId": handle_by_pci,
             "nvmlDeviceGetHandleByIndex": lambda index: f"handle-{index}",
             "nvmlSystemGetDriverVersion": lambda: b"580.65.06",
             "nvmlSystemGetCudaDriverVersion_v2": lambda: 13000,
             "nvmlDeviceGetEnforcedPowerLimit": lambda handle: 700000,
             "nvmlDeviceGetName": lambda handle: "NVIDIA H200"}
    for name, call in calls.items():
        if name not in missing:
            setattr(nvml, name, call)
    return nvml


@pytest.fixture
def on_gpu(monkeypatch):
    """torch reports one H200 with CUDA 13.0; NVML is whatever the test installs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: H200)
    monkeypatch.setattr(torch.version, "cuda", "13.0")

    def install(nvml):
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        return nvml
    return install


TORCH_FIELDS = {"available": True, "name": "NVIDIA H200", "capability": "9.0",
                "multiprocessors": 132, "memory_gib": 139.8, "torch_cuda": "13.0"}
NVML_FIELDS = {"nvml": True, "driver": "580.65.06", "cuda_driver": "13.0",
               "power_limit_w": 700.0, "nvml_name": "NVIDIA H200"}


def test_gpu_details_reads_driver_cuda_driver_and_power_limit_through_nvml(on_gpu):
    nvml = on_gpu(fake_pynvml())
    assert envmod.gpu_details(0) == {**TORCH_FIELDS, **NVML_FIELDS,
                                     "matched_by": "PCI bus id 00000000:1B:00.0"}
    assert nvml.seen_pci == ["00000000:1B:00.0"]


def test_gpu_details_falls_back_to_the_nvml_index_when_the_bus_id_is_unknown(on_gpu):
    on_gpu(fake_pynvml(by_pci=False))
    details = envmod.gpu_details(0)
    assert details["matched_by"] == "NVML index 0 (no PCI bus id from torch)"
    assert details["driver"] == "580.65.06"


@pytest.mark.parametrize("nvml, reason", [
    (fake_pynvml(init_fails=True), "NVML did not initialise: Driver Not Loaded"),
    (None, "nvidia-ml-py is not installed"),
], ids=["nvml-does-not-initialise", "nvidia-ml-py-missing"])
def test_without_nvml_the_gpu_keeps_torch_fields_and_says_why(on_gpu, nvml, reason):
    on_gpu(nvml)            # None in sys.modules: `import pynvml` raises ImportError
    details = envmod.gpu_details(0)
    assert {k: details[k] for k in TORCH_FIELDS} == TORCH_FIELDS
    assert details["nvml"] is False and reason in details["nvml_reason"]
    assert "driver" not in details and "power_limit_w" not in details


def test_a_call_the_driver_lacks_leaves_that_field_empty(on_gpu):
    on_gpu(fake_pynvml(missing=("nvmlSystemGetCudaDriverVersion_v2",)))
    details = envmod.gpu_details(0)
    assert details["cuda_driver"] is None and details["power_limit_w"] == 700.0


def test_without_cuda_gpu_details_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert envmod.gpu_details() == {"available": False, "reason": "no CUDA device"}


@pytest.mark.parametrize("raw, text", [(13000, "13.0"), (12080, "12.8"), (11040, "11.4"),
                                       ("12.4", "12.4"), (None, None)],
                         ids=["13.0", "12.8", "11.4", "string-kept", "unknown"])
def test_nvml_cuda_driver_version_as_text(raw, text):
    assert envmod.cuda_driver_text(raw) == text


def test_package_versions_name_every_package_and_none_where_absent(monkeypatch):
    installed = {"torch": "2.11.0+cu130", "pytorch-triton": "3.6.0+git", "sglang": "0.5.23",
                 "sglang-kernel": "0.4.10", "flashinfer-python": "0.7.2"}

    def version(name):
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]
    monkeypatch.setattr(envmod.importlib.metadata, "version", version)
    versions = envmod.package_versions()
    assert list(versions) == ["python", *(label for label, _ in envmod.PACKAGES)]
    assert versions["python"] == platform.python_version()
    assert (versions["torch"], versions["triton"], versions["sglang"], versions["sgl-kernel"],
            versions["flashinfer"]) == ("2.11.0+cu130", "3.6.0+git", "0.5.23", "0.4.10",
                                        "0.7.2")
    assert versions["transformers"] is None and versions["matplotlib"] is None


def test_package_versions_are_what_is_installed_here():
    versions = envmod.package_versions()
    assert versions["torch"] == importlib.metadata.version("torch")
    assert versions["triton"] == importlib.metadata.version("triton")
    assert versions["transformers"] == importlib.metadata.version("transformers")


def test_environment_on_a_cpu_records_the_stack_and_no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    env = envmod.environment()
    assert env["packages"] == envmod.package_versions()
    assert env["gpu"]["available"] is False and env["gpu"]["reason"]
    assert env["machine"].startswith("CPU (")
    assert env["triton"] == env["packages"]["triton"]


def test_environment_on_a_gpu_records_gpu_details(monkeypatch, on_gpu):
    import det_suite.platform.family as family
    import det_suite.platform.interpreter as interpreter

    on_gpu(fake_pynvml())
    monkeypatch.setattr(interpreter, "interpreter_active", lambda: False)
    monkeypatch.setattr(family, "device_family", lambda *a, **k: "sm90")
    env = envmod.environment()
    assert env["gpu"] == envmod.gpu_details(0)
    assert (env["machine"], env["gpu"]["power_limit_w"], env["gpu"]["driver"],
            env["tile_family"]) == ("NVIDIA H200", 700.0, "580.65.06", "sm90")


def test_under_the_interpreter_the_gpu_is_not_the_machine_that_ran(monkeypatch, on_gpu):
    import det_suite.platform.interpreter as interpreter

    on_gpu(fake_pynvml())
    monkeypatch.setattr(interpreter, "interpreter_active", lambda: True)
    env = envmod.environment()
    assert env["gpu"] == {"available": False,
                          "reason": "Triton interpreter (kernels run on the CPU)"}
    assert env["machine"].endswith(", Triton interpreter")


def test_gathering_lives_only_in_reports_environment():
    """One gatherer: the report's stack module reads results, it gathers nothing itself."""
    for name in ("gpu_details", "package_versions", "nvml_handle", "NvmlUnavailable"):
        assert hasattr(envmod, name) and not hasattr(stack, name), name
