"""The det-suite pytest plugin, driven through pytester in-process runs.

Inner runs see whatever hardware snapshot a test installs (`det_suite.platform.hardware.current`
is looked up at run time), so GPU paths are tested on a CPU machine and nothing here
depends on what this machine has or has installed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import det_suite
from det_suite.platform import hardware
from det_suite import pytest_plugin as plugin
from det_suite.platform.interpreter import default_to_interpreter
from det_suite.pytest_plugin.markers import DIAGNOSTIC_PROPERTY, MARKERS, NOT_RUN_PROPERTY

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

@pytest.mark.parametrize("marker", list(MARKERS))
def test_marker_is_registered_under_strict_markers(pytester, machine, marker):
    pytester.makepyfile(marked_test(marker))
    result = run(pytester, "--collect-only")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


def test_unknown_marker_fails_under_strict_markers(pytester, machine):
    pytester.makepyfile(marked_test("gpuu"))
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*'gpuu' not found in `markers` configuration option*"])


@pytest.mark.parametrize("marker", list(MARKERS))
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


OTHER_SKIPS_LINE = (r"^{total} test\(s\) skipped: not run, not passed \({markers} by det-suite "
                    r"markers, {other} by the tests themselves: pytest\.skip, skipif, "
                    r"importorskip\)$")


def test_not_run_section_counts_every_skip_pytest_counts(pytester, machine):
    """pytest's "skipped" and the section's count agree: a test's own skip is not run
    either. An xfail is neither (pytest counts it apart)."""
    pytester.makepyfile(marked_test("gpu", name="test_a")
                        + "\n\ndef test_b():\n    pytest.skip('tool missing')\n"
                        + "\n\n@pytest.mark.xfail(reason='known')\ndef test_c():\n"
                        + "    assert False\n")
    result = run(pytester)
    result.assert_outcomes(skipped=2, xfailed=1)
    result.stdout.re_match_lines([
        r"^=+ det-suite: not run =+$",
        OTHER_SKIPS_LINE.format(total=2, markers=1, other=1),
        not_run_line("gpu", 1, CPU_SKIPS["gpu"]),
        not_run_line("other", 1, "tool missing"),
    ])


def test_not_run_section_appears_for_skips_det_suite_did_not_make(pytester, machine):
    pytester.makepyfile("import pytest\n\n\n@pytest.mark.skipif(True, reason='flaky here')\n"
                        "def test_a():\n    pass\n")
    result = run(pytester)
    result.assert_outcomes(skipped=1)
    result.stdout.re_match_lines([OTHER_SKIPS_LINE.format(total=1, markers=0, other=1),
                                  not_run_line("other", 1, "flaky here")])


def test_not_run_section_absent_when_nothing_skipped(pytester, machine):
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*det-suite: not run*")


def test_not_run_reason_reaches_junit_xml(pytester, machine):
    pytester.makepyfile(marked_test("sm120"))
    run(pytester, "--junitxml=junit.xml")
    properties = ET.parse(pytester.path / "junit.xml").getroot().iter("property")
    values = [p.get("value") for p in properties if p.get("name") == NOT_RUN_PROPERTY]
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
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    changed = default_to_interpreter()  # what the plugin runs at import
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
        [(DIAGNOSTIC_PROPERTY, "sm120")]


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
    pytest.param(("--det-require=sm90",), pytest.ExitCode.TESTS_FAILED,
                 id="required-marker-without-tests-fails"),
    pytest.param(("--det-require=gpu", "-m", "not gpu"), pytest.ExitCode.NO_TESTS_COLLECTED,
                 id="nothing-selected-keeps-5"),
])
def test_det_require_exit_code(pytester, machine, args, exit_code):
    pytester.makepyfile(marked_test("gpu"))
    assert run(pytester, *args).ret == exit_code


def test_det_require_rejects_unknown_marker(pytester, machine):
    pytester.makepyfile(marked_test("gpu"))
    result = run(pytester, "--det-require=gpu,cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --det-require: *unknown: cuda*"])


# ------------------------------------------------------------------ --det-require

# Each inner run has one test file: the required test (named REQUIRED) and an unmarked
# test that passes, so the run is otherwise green and only the requirement can fail it.
SUITE = "test_suite"
REQUIRED = "test_suite.py::test_needs_gpu"
GPU_TEST = "@pytest.mark.gpu\ndef test_needs_gpu():\n    pass\n"
PLAIN_TEST = "def test_plain():\n    pass\n"


def make_suite(pytester, *tests: str) -> None:
    pytester.makepyfile(**{SUITE: "import pytest\n\n\n" + "\n\n".join(tests)})


def unmet_lines(reason: str, detail: str = "",
                marker_line: str = "1 of 1 test carrying gpu did not run and pass") -> list[str]:
    """The red --det-require=gpu section, as regexes: title, marker line, reason, test."""
    test = rf"^  {REQUIRED}" + (rf"  \({detail}\)$" if detail else "$")
    return [r"^=+ det-suite: --det-require=gpu not met =+$",
            rf"^--det-require=gpu: {marker_line}$",
            rf"^1 {reason}:$", test,
            r"^the run fails: exit code 1, set by --det-require \(nothing else failed\)$"]


# (snapshot, required test source, extra args, environment, expected summary lines)
BYPASSES = [
    pytest.param(H200, GPU_TEST, ("-m", "not gpu"), {},
                 unmet_lines(r"excluded by -m 'not gpu'"), id="excluded-by-m"),
    pytest.param(H200, GPU_TEST, ("-k", "not needs_gpu"), {},
                 unmet_lines(r"deselected by -k, --deselect or a plugin"), id="deselected-by-k"),
    pytest.param(H200, GPU_TEST, ("--deselect", REQUIRED), {},
                 unmet_lines(r"deselected by -k, --deselect or a plugin"),
                 id="deselected-by-deselect"),
    pytest.param(H200, "@pytest.mark.gpu\ndef test_needs_gpu():\n"
                       "    pytest.skip('driver too old')\n", (), {},
                 unmet_lines(r"skipped at run time, not by det-suite's hardware check",
                             r"Skipped: driver too old"), id="pytest-skip-in-test"),
    pytest.param(H200, "@pytest.fixture\ndef driver():\n    pytest.skip('no driver')\n\n\n"
                       "@pytest.mark.gpu\ndef test_needs_gpu(driver):\n    pass\n", (), {},
                 unmet_lines(r"skipped at run time, not by det-suite's hardware check",
                             r"Skipped: no driver"), id="pytest-skip-in-fixture"),
    pytest.param(H200, "@pytest.mark.gpu\n@pytest.mark.skipif(True, reason='flaky here')\n"
                       "def test_needs_gpu():\n    pass\n", (), {},
                 unmet_lines(r"skipped at run time, not by det-suite's hardware check",
                             r"Skipped: flaky here"), id="skipif-mark"),
    pytest.param(H200, "@pytest.mark.gpu\n@pytest.mark.xfail(reason='known bug')\n"
                       "def test_needs_gpu():\n    assert False\n", (), {},
                 unmet_lines(r"xfailed \(an expected failure is not a pass\)", r"known bug"),
                 id="xfail-mark"),
    pytest.param(H200, "@pytest.mark.gpu\ndef test_needs_gpu():\n    pytest.xfail('later')\n",
                 (), {},
                 unmet_lines(r"xfailed \(an expected failure is not a pass\)",
                             r"later"), id="pytest-xfail-in-test"),
    pytest.param(CPU, GPU_TEST, (), {},
                 unmet_lines(r"not run \(hardware\), skipped by det-suite's marker check on "
                             r"CPU, Triton interpreter",
                             r"gpu: needs a CUDA GPU outside the Triton interpreter; found no "
                             r"CUDA device \(CPU, Triton interpreter\)"),
                 id="hardware-skip"),
    pytest.param(H200, GPU_TEST, ("--det-arch-as=sm120",), {},
                 unmet_lines(r"diagnostic, run in diagnosis mode \(--det-arch-as=sm120\) with "
                             r"the sm120 tile table on NVIDIA H200 \(9\.0\), not a pass on any "
                             r"hardware", "passed"),
                 id="diagnosis-mode-option"),
    pytest.param(H200, GPU_TEST, (), {"DET_SUITE_ARCH": "sm120"},
                 unmet_lines(r"diagnostic, run in diagnosis mode \(DET_SUITE_ARCH=sm120\) with "
                             r"the sm120 tile table on NVIDIA H200 \(9\.0\), not a pass on any "
                             r"hardware", "passed"),
                 id="diagnosis-mode-environment"),
    pytest.param(H200, GPU_TEST, ("--det-require=gpu,sm120",), {},
                 [r"^=+ det-suite: --det-require=gpu,sm120 not met =+$",
                  r"^--det-require=gpu: met: 1 test ran and passed$",
                  r"^--det-require=sm120: no test carrying sm120 was collected$",
                  r"^the run fails: exit code 1, set by --det-require \(nothing else failed\)$"],
                 id="no-test-carries-the-marker"),
]


def run_bypass(pytester, machine, monkeypatch, snapshot, source, args, env):
    machine(snapshot)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    make_suite(pytester, source, PLAIN_TEST)
    if not any(arg.startswith("--det-require") for arg in args):
        args = ("--det-require=gpu", *args)
    return run(pytester, *args)


@pytest.mark.parametrize("snapshot, source, args, env, lines", BYPASSES)
def test_det_require_bypass_fails_the_otherwise_green_run(pytester, machine, monkeypatch,
                                                          snapshot, source, args, env, lines):
    result = run_bypass(pytester, machine, monkeypatch, snapshot, source, args, env)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()


@pytest.mark.parametrize("snapshot, source, args, env, lines", BYPASSES)
def test_det_require_bypass_is_named_in_the_summary(pytester, machine, monkeypatch,
                                                    snapshot, source, args, env, lines):
    result = run_bypass(pytester, machine, monkeypatch, snapshot, source, args, env)
    result.stdout.re_match_lines(lines, consecutive=True)


def test_det_require_met_counts_a_test_carrying_two_required_markers_once(pytester, machine):
    machine(H200)
    make_suite(pytester, GPU_TEST, "@pytest.mark.gpu\n@pytest.mark.sm90\n"
                                   "def test_needs_sm90():\n    pass\n", PLAIN_TEST)
    result = run(pytester, "--det-require=gpu,sm90")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.re_match_lines([r"^det-suite: --det-require=gpu,sm90: met: 2 tests ran and "
                                  r"passed on NVIDIA H200 \(9\.0\)$"])


def test_det_require_counts_a_failed_test_as_ran(pytester, machine):
    machine(H200)
    make_suite(pytester, "@pytest.mark.gpu\ndef test_needs_gpu():\n    assert False\n",
               PLAIN_TEST)
    result = run(pytester, "--det-require=gpu")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines([r"^det-suite: --det-require=gpu: met: 1 test ran on NVIDIA "
                                  r"H200 \(9\.0\): 0 passed, 1 failed \(failures fail the "
                                  r"run\)$"])
    result.stdout.no_fnmatch_line("*--det-require=gpu not met*")


def test_det_require_own_gpu_family_in_diagnosis_mode_is_met(pytester, machine):
    machine(RTX_5090)
    make_suite(pytester, GPU_TEST, PLAIN_TEST)
    result = run(pytester, "--det-require=gpu", "--det-arch-as=sm120")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["det-suite: --det-require=gpu: met: 1 test ran and passed on "
                                 "NVIDIA GeForce RTX 5090 (12.0)"])


def test_det_require_leaves_out_tests_skipped_for_a_marker_not_required(pytester, machine):
    # On an H200 a gpu+sm120 test cannot run; only gpu and sm90 are required there.
    machine(H200)
    make_suite(pytester, "@pytest.mark.gpu\n@pytest.mark.sm90\ndef test_needs_gpu():\n"
                         "    pass\n",
               "@pytest.mark.gpu\n@pytest.mark.sm120\ndef test_needs_sm120():\n    pass\n")
    result = run(pytester, "--det-require=gpu,sm90")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(['det-suite: --det-require=gpu,sm90: met: 1 test ran and '
                                 'passed on NVIDIA H200 (9.0); 1 test skipped for markers not '
                                 'required (sm120), see "det-suite: not run"'])


def test_det_require_is_unmet_when_every_test_skipped_for_a_marker_not_required(pytester,
                                                                               machine):
    machine(H200)
    make_suite(pytester, "@pytest.mark.gpu\n@pytest.mark.sm120\ndef test_needs_gpu():\n"
                         "    pass\n", PLAIN_TEST)
    result = run(pytester, "--det-require=gpu")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines(unmet_lines(
        r"not run \(hardware\), skipped by det-suite's marker check on NVIDIA H200 \(9\.0\)",
        r"sm120: needs an SM12x GPU \(compute capability 12\.x\); found NVIDIA H200 \(9\.0\)",
        marker_line="no test carrying gpu ran: 1 test skipped for markers not required"),
        consecutive=True)


def test_det_require_names_tests_the_run_stopped_before(pytester, machine):
    machine(H200)
    make_suite(pytester, "def test_fails_first():\n    assert False\n", GPU_TEST)
    result = run(pytester, "--det-require=gpu", "-x")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines([
        r"^1 not reported \(collected, but no result arrived: did the run stop early\?\):$",
        rf"^  {REQUIRED}$", r"^the run fails: exit code 1 \(tests failed as well\)$"],
        consecutive=True)


def test_det_require_is_not_checked_by_collect_only(pytester, machine):
    make_suite(pytester, GPU_TEST)
    result = run(pytester, "--det-require=gpu", "--collect-only")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["det-suite: --det-require=gpu: not checked (--collect-only "
                                 "runs no test)"])


# ------------------------------------------------------------------ --det-require, xdist
# Under xdist the workers collect, deselect and run; the controller judges. Each test below
# runs in-process and with -n 2 and expects the same words.

WITH_AND_WITHOUT_XDIST = pytest.mark.parametrize(
    "xdist", [(), ("-p", "xdist", "-n", "2")], ids=["in-process", "xdist"])


@pytest.fixture
def workers_see(pytester, machine, monkeypatch):
    """Install a fake snapshot in this process and, through a conftest, in xdist workers
    (fresh processes that would otherwise probe this machine)."""
    monkeypatch.setenv("PYTHONPATH", str(Path(det_suite.__file__).resolve().parents[1]))

    def install(snapshot: hardware.Snapshot) -> None:
        machine(snapshot)
        fields = {f.name: getattr(snapshot, f.name)
                  for f in dataclasses.fields(snapshot) if f.init}
        pytester.makeconftest(
            "from det_suite.platform import hardware\n\n\n"
            "def pytest_configure(config):\n"
            "    if hasattr(config, 'workerinput'):\n"
            f"        snapshot = hardware.Snapshot(**{fields!r})\n"
            "        hardware.current = lambda: snapshot\n")

    return install


def require_section(result) -> list[str]:
    """The red --det-require section: its title, then every line through the verdict."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines)
                 if re.match(r"^=+ det-suite: --det-require", line))
    end = next(i for i, line in enumerate(lines) if line.startswith("the run fails:"))
    return [lines[start].strip("= ")] + lines[start + 1:end + 1]


EVERY_REASON = [  # on an H200 with --det-require=gpu,sm120 -m "not slow" --deselect ...
    "@pytest.mark.gpu\ndef test_deselected():\n    pass\n",
    "@pytest.mark.gpu\n@pytest.mark.slow\ndef test_excluded():\n    pass\n",
    "@pytest.mark.gpu\ndef test_skips():\n    pytest.skip('driver too old')\n",
    "@pytest.mark.gpu\n@pytest.mark.xfail(reason='known bug')\ndef test_xfails():\n"
    "    assert False\n",
    "@pytest.mark.gpu\n@pytest.mark.sm120\ndef test_needs_sm120():\n    pass\n",
    "@pytest.mark.gpu\ndef test_runs():\n    pass\n",
    PLAIN_TEST,
]


@WITH_AND_WITHOUT_XDIST
def test_det_require_names_every_reason(pytester, workers_see, xdist):
    workers_see(H200)
    make_suite(pytester, *EVERY_REASON)
    result = run(pytester, "--det-require=gpu,sm120", "-m", "not slow",
                 "--deselect", "test_suite.py::test_deselected", *xdist)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert require_section(result) == [
        "det-suite: --det-require=gpu,sm120 not met",
        "--det-require=gpu: 5 of 6 tests carrying gpu did not run and pass",
        "--det-require=sm120: 1 of 1 test carrying sm120 did not run and pass",
        "1 deselected by -k, --deselect or a plugin:",
        "  test_suite.py::test_deselected",
        "1 excluded by -m 'not slow':",
        "  test_suite.py::test_excluded",
        "1 skipped at run time, not by det-suite's hardware check:",
        "  test_suite.py::test_skips  (Skipped: driver too old)",
        "1 xfailed (an expected failure is not a pass):",
        "  test_suite.py::test_xfails  (known bug)",
        "1 not run (hardware), skipped by det-suite's marker check on NVIDIA H200 (9.0):",
        "  test_suite.py::test_needs_sm120  (sm120: needs an SM12x GPU (compute capability "
        "12.x); found NVIDIA H200 (9.0))",
        "the run fails: exit code 1, set by --det-require (nothing else failed)",
    ], result.stdout.str()


@WITH_AND_WITHOUT_XDIST
def test_det_require_names_diagnostic_runs(pytester, workers_see, xdist):
    workers_see(H200)
    make_suite(pytester, GPU_TEST, PLAIN_TEST)
    result = run(pytester, "--det-require=gpu", "--det-arch-as=sm120", *xdist)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert require_section(result) == [
        "det-suite: --det-require=gpu not met",
        "--det-require=gpu: 1 of 1 test carrying gpu did not run and pass",
        "1 diagnostic, run in diagnosis mode (--det-arch-as=sm120) with the sm120 tile table "
        "on NVIDIA H200 (9.0), not a pass on any hardware:",
        f"  {REQUIRED}  (passed)",
        "the run fails: exit code 1, set by --det-require (nothing else failed)",
    ], result.stdout.str()


@WITH_AND_WITHOUT_XDIST
def test_det_require_met_says_how_many_ran(pytester, workers_see, xdist):
    workers_see(H200)
    make_suite(pytester, GPU_TEST, "@pytest.mark.gpu\ndef test_needs_gpu_too():\n    pass\n",
               PLAIN_TEST)
    result = run(pytester, "--det-require=gpu", *xdist)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["det-suite: --det-require=gpu: met: 2 tests ran and passed on "
                                 "NVIDIA H200 (9.0)"])


@WITH_AND_WITHOUT_XDIST
def test_det_require_keeps_exit_code_5_when_everything_is_deselected(pytester, workers_see,
                                                                   xdist):
    workers_see(H200)
    make_suite(pytester, GPU_TEST)
    result = run(pytester, "--det-require=gpu", "-m", "not gpu", *xdist)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert require_section(result) == [
        "det-suite: --det-require=gpu not met",
        "--det-require=gpu: 1 of 1 test carrying gpu did not run and pass",
        "1 excluded by -m 'not gpu':",
        f"  {REQUIRED}",
        "the run fails: exit code 5 (no tests collected), as pytest reports it",
    ], result.stdout.str()


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
