"""The report's environment rows come from what each result recorded through
reports.environment.environment(): GPU, capability, driver, power limit, CUDA, torch,
triton, transformers, sglang, flashinfer. A field a result did not record reads "not
recorded", a GPU field of a run without a GPU reads "n/a (no GPU)", and a package the result
lists as absent reads "not installed"; none is filled from the machine the report is built
on."""

import json

import pytest
import torch

from det_suite.reports import environment as envmod
from det_suite.reports.repro import ReportSettings, build_report
from det_suite.reports.repro.render import environment_rows, render_markdown
from det_suite.reports.repro.stack import NO_GPU, environment_row, not_installed

H200_GPU = {"available": True, "name": "NVIDIA H200", "capability": "9.0",
            "multiprocessors": 132, "memory_gib": 139.8, "torch_cuda": "13.0", "nvml": True,
            "driver": "580.65.06", "cuda_driver": "13.0", "power_limit_w": 700.0}
PACKAGES = {"python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0",
            "transformers": "4.57.1", "sglang": "0.5.23", "flashinfer": "0.7.2"}
H200_ENV = {"machine": "NVIDIA H200", "torch": "2.11.0+cu130", "torch_cuda": "13.0",
            "triton": "3.6.0", "python": "3.12.3", "det_suite": "0.1.0",
            "gpu": H200_GPU, "packages": PACKAGES}
H200_ROW = {"GPU": "NVIDIA H200", "capability": "9.0", "driver": "580.65.06",
            "power limit": "700 W", "CUDA (torch)": "13.0", "CUDA driver": "13.0",
            "torch": "2.11.0+cu130", "triton": "3.6.0", "transformers": "4.57.1",
            "sglang": "0.5.23", "flashinfer": "0.7.2", "python": "3.12.3",
            "det-suite": "0.1.0"}


@pytest.mark.parametrize("data, expected", [
    ({"environment": H200_ENV}, H200_ROW),
    ({"environment": {**H200_ENV, "gpu": {"name": "NVIDIA H200", "capability": "9.0"},
                      "packages": None}},
     {**H200_ROW, "driver": None, "power limit": None, "CUDA driver": None,
      "transformers": None, "sglang": None, "flashinfer": None}),
    ({"environment": {k: v for k, v in H200_ENV.items() if k not in ("gpu", "packages")},
      "gpu": H200_GPU, "packages": PACKAGES}, H200_ROW),
    ({"environment": {**H200_ENV, "gpu": {**H200_GPU, "driver": "590.10"}},
      "gpu": {**H200_GPU, "driver": "580.65.06"}}, {**H200_ROW, "driver": "590.10"}),
    ({"environment": {"machine": "CPU (x86_64), Triton interpreter", "torch": "2.13.0+cpu",
                      "torch_cuda": None, "triton": "3.6.0", "python": "3.11.7",
                      "det_suite": "0.1.0", "packages": {**PACKAGES, "sglang": None},
                      "gpu": {"available": False, "reason": "no CUDA device"}}},
     {**H200_ROW, "GPU": "CPU (x86_64), Triton interpreter", "capability": NO_GPU,
      "driver": NO_GPU, "power limit": NO_GPU, "CUDA (torch)": NO_GPU, "CUDA driver": NO_GPU,
      "torch": "2.13.0+cpu", "python": "3.11.7", "sglang": None}),
], ids=["h200-full-environment", "older-result-without-nvml-or-packages",
        "e2e-copies-beside-the-environment", "the-environment-wins-over-a-copy",
        "cpu-run-has-no-gpu-fields"])
def test_environment_row(data, expected):
    assert environment_row(data) == expected


@pytest.mark.parametrize("data, absent", [
    ({"environment": {"packages": {"sglang": None, "flashinfer": None,
                                   "transformers": "4.57.1"}}}, {"sglang", "flashinfer"}),
    ({"packages": {"sglang": None}}, {"sglang"}),
    ({"environment": {}}, set()),
], ids=["listed-as-none", "e2e-top-level", "no-package-list"])
def test_not_installed_only_where_the_result_listed_the_package(data, absent):
    assert not_installed(data) == absent


def _write(path, payload):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


def _column(payload, result_number):
    header, rows = environment_rows(payload)
    column = next(i for i, h in enumerate(header) if h == f"results {result_number}")
    return {row[0]: row[column] for row in rows}


def test_a_result_recorded_by_environment_fills_every_row(tmp_path, monkeypatch):
    """What any check writes today (environment() on this CPU machine) leaves no row
    "not recorded" in the report."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = _write(tmp_path / "in" / "x.json", {"kind": "x", "ok": True,
                                               "environment": envmod.environment()})
    payload = build_report(ReportSettings(inputs=(str(path),), out=str(tmp_path / "r")))
    column = _column(payload, 1)
    versions = envmod.package_versions()
    assert "not recorded" not in column.values()
    assert (column["torch"], column["triton"], column["transformers"]) == (
        torch.__version__, versions["triton"], versions["transformers"])
    assert column["sglang"] == (versions["sglang"] or "not installed")
    assert column["capability"] == column["driver"] == column["power limit"] == NO_GPU


def test_a_gpu_result_shows_driver_and_power_limit(tmp_path):
    path = _write(tmp_path / "in" / "x.json", {"kind": "x", "ok": True,
                                               "environment": {**H200_ENV, "host": "h200"}})
    payload = build_report(ReportSettings(inputs=(str(path),), out=str(tmp_path / "r")))
    assert _column(payload, 1) == H200_ROW
    assert "| power limit | 700 W |" in render_markdown(payload)


def test_a_field_no_result_recorded_is_never_taken_from_the_report_machine(tmp_path):
    old = {k: v for k, v in H200_ENV.items() if k not in ("gpu", "packages")}
    path = _write(tmp_path / "in" / "x.json", {"kind": "x", "ok": True, "environment": old})
    payload = build_report(ReportSettings(inputs=(str(path),), out=str(tmp_path / "r")))
    column = _column(payload, 1)
    assert (column["driver"], column["transformers"], column["sglang"]) == (
        "not recorded", "not recorded", "not recorded")
    built_on = {row[0]: row[-1] for row in environment_rows(payload)[1]}
    assert built_on["transformers"] == (envmod.package_versions()["transformers"]
                                        or "not installed")
