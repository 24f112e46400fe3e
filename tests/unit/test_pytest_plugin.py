"""The det-suite pytest plugin, driven through pytester in-process runs.

Inner runs see whatever hardware snapshot a test installs (`det_suite.hardware.current`
is looked up at run time), so GPU paths are tested on a CPU machine and nothing here
depends on what this machine has or has installed.
"""

from __future__ import annotations

import dataclasses
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import det_suite
from det_suite import hardware
from det_suite import pytest_plugin as plugin

pytest_plugins = ["pytester"]

PLUGIN_ARGS = ("-p", "det_suite.pytest_plugin")

CPU = hardware.Snapshot(
    cuda_available=False, device_name=None, capability=None, interpreter_active=True,
    transformers=False, safetensors=False, sglang=False,
    torch_version="2.13.0+cpu", triton_version="3.6.0")
H200 = dataclasses.replace(CPU, cuda_available=True, device_name="NVIDIA H200",
                           capability=(9, 0), interpreter_active=False,
                           torch_version="2.11.0")
RTX_5090 = dataclasses.replace(H200, device_name="NVIDIA GeForce RTX 5090", capability=(12, 0))
L4 = dataclasses.replace(H200, device_name="NVIDIA L4", capability=(8, 9))
A100 = dataclasses.replace(H200, device_name="NVIDIA A100-SXM4-80GB", capability=(8, 0))
H200_INTERPRETED = dataclasses.replace(H200, interpreter_active=True)


# ------------------------------------------------------------------ helpers

@pytest.fixture
def machine(monkeypatch):
    """Install a fake hardware snapshot for inner runs; no arch override leaks in."""
    monkeypatch.delenv("DET_SUITE_ARCH", raising=False)

    def install(snapshot: hardware.Snapshot) -> None:
        monkeypatch.setattr(hardware, "current", lambda: snapshot)

    install(CPU)
    return install


def marked_test(*markers: str, name: str = "test_it") -> str:
    decorators = "".join(f"@pytest.mark.{marker}\n" for marker in markers)
    return f"import pytest\n\n\n{decorators}def {name}():\n    pass\n"


def run(pytester, *args):
    return pytester.runpytest(*PLUGIN_ARGS, "--strict-markers", "-ra", *args)


def not_run_line(marker: str, count: int, reason_pattern: str) -> str:
    return rf"^  {marker}\s+{count}  {reason_pattern}$"


# ------------------------------------------------------------------ markers

@pytest.mark.parametrize("marker", list(plugin.MARKERS))
def test_marker_is_registered_under_strict_markers(pytester, machine, marker):
    pytester.makepyfile(marked_test(marker))
    result = run(pytester, "--collect-only")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


def test_unknown_marker_fails_under_strict_markers(pytester, machine):
    pytester.makepyfile(marked_test("gpuu"))
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*'gpuu' not found in `markers` configuration option*"])


@pytest.mark.parametrize("marker", list(plugin.MARKERS))
def test_marker_is_listed_by_pytest_markers(pytester, machine, marker):
    result = pytester.runpytest(*PLUGIN_ARGS, "--markers")
    result.stdout.fnmatch_lines([f"@pytest.mark.{marker}: *"])


# ------------------------------------------------------------------ CPU machine

CPU_SKIPS = {
    "gpu": r"needs a CUDA GPU outside the Triton interpreter; "
           r"found no CUDA device \(CPU, Triton interpreter\)",
    "sm120": r"needs an SM12x GPU \(compute capability 12\.x\); "
             r"found no CUDA device \(CPU, Triton interpreter\)",
    "sm90": r"needs an SM90 GPU \(compute capability 9\.0\); found no CUDA device.*",
    "fp8": r"needs a GPU with compute capability >= 8\.9 \(FP8 MMA\); found no CUDA device.*",
    "graph": r"needs CUDA Graphs .*; found no CUDA device.*",
}


@pytest.mark.parametrize("marker", list(CPU_SKIPS))
def test_hardware_marker_skips_on_cpu_with_reason(pytester, machine, marker):
    pytester.makepyfile(marked_test(marker))
    result = run(pytester)
    result.assert_outcomes(skipped=1)
    result.stdout.re_match_lines([rf"^SKIPPED \[1\] .*: {marker}: {CPU_SKIPS[marker]}$"])


@pytest.mark.parametrize("marker", list(CPU_SKIPS))
def test_hardware_skip_is_counted_as_not_run(pytester, machine, marker):
    pytester.makepyfile(marked_test(marker))
    result = run(pytester)
    result.stdout.re_match_lines([
        r"^=+ det-suite: not run =+$",
        r"^1 test\(s\) skipped by det-suite markers: not run, not passed$",
        not_run_line(marker, 1, CPU_SKIPS[marker]),
    ])


def test_not_run_section_counts_each_marker(pytester, machine):
    pytester.makepyfile(marked_test("gpu", name="test_a") + marked_test("gpu", name="test_b")
                        + marked_test("sm120", "gpu", name="test_c") + "\n\ndef test_d():\n"
                        "    pass\n")
    result = run(pytester)
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.re_match_lines([r"^3 test\(s\) skipped.*", not_run_line("gpu", 3, ".*"),
                                  not_run_line("sm120", 1, ".*")])


def test_not_run_section_absent_when_nothing_skipped(pytester, machine):
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*det-suite: not run*")


def test_not_run_reason_reaches_junit_xml(pytester, machine):
    pytester.makepyfile(marked_test("sm120"))
    run(pytester, "--junitxml=junit.xml")
    properties = ET.parse(pytester.path / "junit.xml").getroot().iter("property")
    values = [p.get("value") for p in properties if p.get("name") == plugin.NOT_RUN_PROPERTY]
    assert len(values) == 1 and values[0].startswith("sm120: needs an SM12x GPU"), values


def test_not_run_is_counted_on_the_xdist_controller(pytester, machine, monkeypatch):
    # Workers are fresh processes with the real snapshot; perf without --run-perf skips on
    # every machine, so the outcome is the same wherever this runs.
    monkeypatch.setenv("PYTHONPATH", str(Path(det_suite.__file__).resolve().parents[1]))
    pytester.makepyfile(marked_test("perf"))
    result = run(pytester, "-p", "xdist", "-n", "2")
    result.assert_outcomes(skipped=1)
    result.stdout.re_match_lines([not_run_line("perf", 1, "runs only with --run-perf.*")])


# ------------------------------------------------------------------ slow / perf

@pytest.mark.parametrize("snapshot, args, outcome", [
    pytest.param(CPU, (), "skipped", id="cpu-without-run-slow-skips"),
    pytest.param(CPU, ("--run-slow",), "passed", id="cpu-with-run-slow-runs"),
    pytest.param(H200, (), "passed", id="gpu-runs-without-run-slow"),
    pytest.param(H200_INTERPRETED, (), "skipped", id="gpu-under-interpreter-skips"),
])
def test_slow_marker(pytester, machine, snapshot, args, outcome):
    machine(snapshot)
    pytester.makepyfile(marked_test("slow"))
    result = run(pytester, *args)
    result.assert_outcomes(**{outcome: 1})


def test_slow_skip_reason_names_the_option(pytester, machine):
    pytester.makepyfile(marked_test("slow"))
    result = run(pytester)
    result.stdout.re_match_lines([r"^SKIPPED .*: slow: runs only with --run-slow or on a GPU; "
                                  r"found no CUDA device.*"])


@pytest.mark.parametrize("snapshot, args, outcome, reason", [
    pytest.param(CPU, (), "skipped", r"perf: runs only with --run-perf.*",
                 id="without-run-perf-skips-even-on-gpu-machines"),
    pytest.param(H200, (), "skipped", r"perf: runs only with --run-perf.*",
                 id="gpu-without-run-perf-skips"),
    pytest.param(CPU, ("--run-perf",), "skipped",
                 r"perf: needs a CUDA GPU .* to time; found no CUDA device.*",
                 id="cpu-with-run-perf-skips-naming-gpu"),
    pytest.param(H200, ("--run-perf",), "passed", None, id="gpu-with-run-perf-runs"),
])
def test_perf_marker(pytester, machine, snapshot, args, outcome, reason):
    machine(snapshot)
    pytester.makepyfile(marked_test("perf"))
    result = run(pytester, *args)
    result.assert_outcomes(**{outcome: 1})
    if reason:
        result.stdout.re_match_lines([rf"^SKIPPED .*: {reason}$"])


# ------------------------------------------------------------------ packages

@pytest.mark.parametrize("marker, installed, reason", [
    pytest.param("model", {"safetensors": True}, r"model: .*; not importable: transformers",
                 id="model-names-missing-transformers"),
    pytest.param("model", {"transformers": True}, r"model: .*; not importable: safetensors",
                 id="model-names-missing-safetensors"),
    pytest.param("model", {}, r"model: .*; not importable: transformers, safetensors",
                 id="model-names-both-missing"),
    pytest.param("sglang", {}, r"sglang: needs sglang .*; not importable: sglang",
                 id="sglang-names-sglang"),
])
def test_package_marker_skip_names_missing_package(pytester, machine, marker, installed,
                                                   reason):
    machine(dataclasses.replace(CPU, **installed))
    pytester.makepyfile(marked_test(marker))
    result = run(pytester)
    result.assert_outcomes(skipped=1)
    result.stdout.re_match_lines([rf"^SKIPPED .*: {reason}$"])


@pytest.mark.parametrize("marker, installed", [
    pytest.param("model", {"transformers": True, "safetensors": True}, id="model"),
    pytest.param("sglang", {"sglang": True}, id="sglang"),
])
def test_package_marker_runs_when_importable(pytester, machine, marker, installed):
    machine(dataclasses.replace(CPU, **installed))
    pytester.makepyfile(marked_test(marker))
    run(pytester).assert_outcomes(passed=1)


# ------------------------------------------------------------------ GPU paths (fake)

@pytest.mark.parametrize("snapshot, marker, reason", [
    pytest.param(H200, "sm120", r"sm120: needs an SM12x GPU \(compute capability 12\.x\); "
                                r"found NVIDIA H200 \(9\.0\)", id="sm120-on-h200"),
    pytest.param(RTX_5090, "sm90", r"sm90: needs an SM90 GPU \(compute capability 9\.0\); "
                                   r"found NVIDIA GeForce RTX 5090 \(12\.0\)", id="sm90-on-5090"),
    pytest.param(A100, "fp8", r"fp8: needs .*>= 8\.9.*; found NVIDIA A100-SXM4-80GB \(8\.0\)",
                 id="fp8-on-a100"),
    pytest.param(H200_INTERPRETED, "gpu",
                 r"gpu: needs .*; found NVIDIA H200 \(9\.0\), but TRITON_INTERPRET is set.*",
                 id="gpu-under-interpreter"),
    pytest.param(H200_INTERPRETED, "sm90", r"sm90: .*but TRITON_INTERPRET is set.*",
                 id="sm90-under-interpreter"),
])
def test_gpu_marker_skips_on_wrong_gpu(pytester, machine, snapshot, marker, reason):
    machine(snapshot)
    pytester.makepyfile(marked_test(marker))
    result = run(pytester)
    result.assert_outcomes(skipped=1)
    result.stdout.re_match_lines([rf"^SKIPPED .*: {reason}$"])


@pytest.mark.parametrize("snapshot, marker", [
    pytest.param(H200, "sm90", id="sm90-on-h200"),
    pytest.param(H200, "gpu", id="gpu-on-h200"),
    pytest.param(H200, "graph", id="graph-on-h200"),
    pytest.param(H200, "fp8", id="fp8-on-h200"),
    pytest.param(L4, "fp8", id="fp8-on-sm89"),
    pytest.param(RTX_5090, "sm120", id="sm120-on-5090"),
    pytest.param(RTX_5090, "fp8", id="fp8-on-5090"),
])
def test_gpu_marker_runs_on_matching_gpu(pytester, machine, snapshot, marker):
    machine(snapshot)
    pytester.makepyfile(marked_test(marker))
    run(pytester).assert_outcomes(passed=1)


# ------------------------------------------------------------------ header

@pytest.mark.parametrize("snapshot, line", [
    pytest.param(CPU, "det-suite: machine: CPU, Triton interpreter | tiles: sm120 "
                      "(interpreter) | torch 2.13.0+cpu, triton 3.6.0", id="cpu"),
    pytest.param(H200, "det-suite: machine: NVIDIA H200 (9.0) | tiles: sm90 (detected) | "
                       "torch 2.11.0, triton 3.6.0", id="h200"),
    pytest.param(H200_INTERPRETED, "det-suite: machine: NVIDIA H200 (9.0) under the Triton "
                                   "interpreter (TRITON_INTERPRET is set) | tiles: sm120 "
                                   "(interpreter) | *", id="h200-interpreted"),
])
def test_header_names_machine_tiles_and_versions(pytester, machine, snapshot, line):
    machine(snapshot)
    pytester.makepyfile("def test_plain():\n    pass\n")
    run(pytester).stdout.fnmatch_lines([line])


@pytest.mark.parametrize("set_by_plugin", [True, False], ids=["set-by-plugin", "inherited"])
def test_header_says_when_plugin_set_the_interpreter(pytester, machine, monkeypatch,
                                                     set_by_plugin):
    monkeypatch.setattr(plugin, "INTERPRETER_SET_BY_PLUGIN", set_by_plugin)
    pytester.makepyfile("def test_plain():\n    pass\n")
    stdout = run(pytester).stdout
    line = "det-suite: TRITON_INTERPRET=1 set by the det-suite plugin (no CUDA device)*"
    if set_by_plugin:
        stdout.fnmatch_lines([line])
    else:
        stdout.no_fnmatch_line(line)


# ------------------------------------------------------------------ load-time interpreter

@pytest.mark.parametrize("env, cuda, expected", [
    pytest.param(None, False, "1", id="no-gpu-unset-sets-1"),
    pytest.param("0", False, "0", id="no-gpu-explicit-0-kept"),
    pytest.param(None, True, None, id="gpu-left-unset"),
])
def test_interpreter_default_at_load(monkeypatch, env, cuda, expected):
    if env is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", env)
    monkeypatch.setattr(hardware, "cuda_available", lambda: cuda)
    changed = plugin._default_to_interpreter()
    assert (changed, os.environ.get("TRITON_INTERPRET")) == (expected == "1" and env is None,
                                                            expected)


# ------------------------------------------------------------------ diagnosis mode

@pytest.mark.parametrize("value", ["sm75", "SM90", "default", ""],
                         ids=["unknown", "wrong-case", "default-has-no-arch-tests", "empty"])
def test_det_arch_as_rejects_invalid_family(pytester, machine, value):
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = run(pytester, f"--det-arch-as={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument --det-arch-as: '{value}' is not a GPU family with "
                                 "a tile table; expected one of sm89, sm90, sm100, sm120*"])


def test_invalid_det_suite_arch_environment_errors(pytester, machine, monkeypatch):
    monkeypatch.setenv("DET_SUITE_ARCH", "sm75")
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*DET_SUITE_ARCH='sm75' is not a GPU family*"])


def test_det_arch_as_runs_foreign_arch_test_on_present_gpu(pytester, machine):
    machine(H200)
    pytester.makepyfile(marked_test("sm120"))
    result = run(pytester, "--det-arch-as=sm120")
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r"^=+ DIAGNOSTIC \(not a pass on sm120 hardware\) =+$",
                                  r"^  PASSED  test_det_arch_as_runs_.*\.py::test_it$"])


@pytest.mark.parametrize("markers, listed", [
    pytest.param(("gpu",), True, id="gpu-test-listed"),
    pytest.param(("fp8",), True, id="fp8-test-listed"),
    pytest.param(("graph",), True, id="graph-test-listed"),
    pytest.param((), False, id="unmarked-test-not-listed"),
])
def test_det_arch_as_labels_every_gpu_test_run_under_foreign_table(pytester, machine, markers,
                                                                     listed):
    machine(H200)
    pytester.makepyfile(marked_test(*markers))
    result = run(pytester, "--det-arch-as=sm120")
    result.assert_outcomes(passed=1)
    assert ("DIAGNOSTIC (not a pass on sm120 hardware)" in result.stdout.str()) is listed


def test_det_arch_as_lists_setup_errors_as_diagnostic(pytester, machine):
    machine(H200)
    pytester.makepyfile("import pytest\n\n\n@pytest.fixture\ndef broken():\n"
                        "    raise RuntimeError('setup')\n\n\n@pytest.mark.sm120\n"
                        "def test_it(broken):\n    pass\n")
    result = run(pytester, "--det-arch-as=sm120")
    result.assert_outcomes(errors=1)
    result.stdout.re_match_lines([r"^  ERROR   .*::test_it$"])


def test_det_arch_as_header_is_loud(pytester, machine):
    machine(H200)
    pytester.makepyfile("def test_plain():\n    pass\n")
    run(pytester, "--det-arch-as=sm120").stdout.fnmatch_lines([
        "det-suite: machine: NVIDIA H200 (9.0) | tiles: sm120 (override (DET_SUITE_ARCH)) | *",
        "det-suite: !!! DIAGNOSIS MODE (--det-arch-as=sm120): sm120-marked tests run on "
        "NVIDIA H200 (9.0) with the sm120 tile table; results are NOT passes on sm120 "
        "hardware !!!"])


def test_det_arch_as_records_junit_property(pytester, machine):
    machine(H200)
    pytester.makepyfile(marked_test("sm120"))
    run(pytester, "--det-arch-as=sm120", "--junitxml=junit.xml")
    properties = ET.parse(pytester.path / "junit.xml").getroot().iter("property")
    assert [(p.get("name"), p.get("value")) for p in properties] == \
        [(plugin.DIAGNOSTIC_PROPERTY, "sm120")]


def test_det_arch_as_skips_other_families_arch_tests(pytester, machine):
    # On an H200 the sm90 test would run sm120's table: its pass would mean nothing for sm90.
    machine(H200)
    pytester.makepyfile(marked_test("sm90"))
    result = run(pytester, "--det-arch-as=sm120")
    result.assert_outcomes(skipped=1)
    result.stdout.re_match_lines([r"^SKIPPED .*: sm90: not run in diagnosis mode: "
                                  r"DET_SUITE_ARCH=sm120 forces the sm120 tile table.*"])


def test_det_arch_as_still_skips_without_gpu(pytester, machine):
    pytester.makepyfile(marked_test("sm120"))
    result = run(pytester, "--det-arch-as=sm120")
    result.assert_outcomes(skipped=1)
    result.stdout.re_match_lines([r"^SKIPPED .*: sm120: needs a CUDA GPU to run sm120 tests in "
                                  r"diagnosis mode .*; found no CUDA device.*"])


def test_det_arch_as_matching_gpu_is_not_diagnostic(pytester, machine):
    machine(RTX_5090)
    pytester.makepyfile(marked_test("sm120"))
    result = run(pytester, "--det-arch-as=sm120")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*DIAGNOSTIC*")


def test_det_arch_as_sets_environment_during_run_only(pytester, machine):
    machine(H200)
    pytester.makepyfile("import os\n\n\ndef test_env():\n"
                        "    assert os.environ['DET_SUITE_ARCH'] == 'sm120'\n")
    run(pytester, "--det-arch-as=sm120").assert_outcomes(passed=1)
    assert "DET_SUITE_ARCH" not in os.environ


def test_inherited_det_suite_arch_is_diagnosis_mode(pytester, machine, monkeypatch):
    machine(H200)
    monkeypatch.setenv("DET_SUITE_ARCH", "sm120")
    pytester.makepyfile(marked_test("sm120"))
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["det-suite: !!! DIAGNOSIS MODE (DET_SUITE_ARCH=sm120)*",
                                 "*DIAGNOSTIC (not a pass on sm120 hardware)*"])


# ------------------------------------------------------------------ exit codes

def test_no_tests_collected_keeps_exit_code_5(pytester, machine):
    pytester.makepyfile("")
    assert run(pytester).ret == pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.mark.parametrize("args, exit_code", [
    pytest.param((), pytest.ExitCode.OK, id="without-require-skips-are-green"),
    pytest.param(("--det-require=gpu",), pytest.ExitCode.TESTS_FAILED,
                 id="required-marker-skipped-fails"),
    pytest.param(("--det-require=sm90",), pytest.ExitCode.OK,
                 id="other-marker-required-stays-green"),
    pytest.param(("--det-require=gpu", "-m", "not gpu"), pytest.ExitCode.NO_TESTS_COLLECTED,
                 id="nothing-selected-keeps-5"),
])
def test_det_require_exit_code(pytester, machine, args, exit_code):
    pytester.makepyfile(marked_test("gpu"))
    assert run(pytester, *args).ret == exit_code


def test_det_require_names_tests_that_did_not_run(pytester, machine):
    pytester.makepyfile(marked_test("gpu"))
    run(pytester, "--det-require=gpu").stdout.re_match_lines([
        r"^=+ det-suite: --det-require=gpu not met =+$",
        r"^  test_det_require_names_.*\.py::test_it$"])


def test_det_require_rejects_unknown_marker(pytester, machine):
    pytester.makepyfile(marked_test("gpu"))
    result = run(pytester, "--det-require=gpu,cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --det-require: *unknown: cuda*"])


# ------------------------------------------------------------------ loading

@pytest.fixture
def installed_entry_point(tmp_path, monkeypatch):
    """Make importlib.metadata see det-suite's pytest11 entry point, as an install would."""
    dist = tmp_path / "site" / "det_suite-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: det-suite\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[pytest11]\n{plugin.ENTRY_POINT_NAME} = det_suite.pytest_plugin\n")
    monkeypatch.syspath_prepend(str(dist.parent))
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)


@pytest.mark.parametrize("args", [
    pytest.param((), id="entry-point-only"),
    pytest.param(PLUGIN_ARGS, id="entry-point-and-dash-p-module"),
    pytest.param(("-p", plugin.ENTRY_POINT_NAME), id="entry-point-and-dash-p-name"),
])
def test_plugin_loads_once_when_installed(pytester, machine, installed_entry_point, args):
    pytester.makepyfile(marked_test("gpu"))
    result = pytester.runpytest(*args, "--strict-markers")
    result.assert_outcomes(skipped=1)
    headers = [line for line in result.stdout.lines if line.startswith("det-suite: machine:")]
    assert len(headers) == 1, result.stdout.str()


# ------------------------------------------------------------------ hardware snapshot

def test_detect_without_cuda_never_queries_the_device(monkeypatch):
    import torch

    def forbidden(*_args, **_kwargs):
        raise AssertionError("queried a CUDA device although none is available")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", forbidden)
    monkeypatch.setattr(torch.cuda, "get_device_capability", forbidden)
    snapshot = hardware.detect()
    assert (snapshot.cuda_available, snapshot.capability, snapshot.family) == (False, None, None)


@pytest.mark.parametrize("snapshot, family", [
    pytest.param(H200, "sm90", id="h200"), pytest.param(RTX_5090, "sm120", id="5090"),
    pytest.param(L4, "sm89", id="l4"), pytest.param(A100, "default", id="a100"),
])
def test_snapshot_family_follows_capability(snapshot, family):
    assert snapshot.family == family


def test_snapshot_with_cuda_requires_capability():
    with pytest.raises(ValueError, match="capability must be a"):
        dataclasses.replace(H200, capability=None)
