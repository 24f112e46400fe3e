"""Per-family selection (`pytest -m sm120` selects what must pass on SM12x) and the
bit-exact comparison count, driven through pytester on faked hardware snapshots (as in
test_pytest_plugin.py: inner runs look `hardware.current` up at run time)."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import det_suite
from det_suite.platform import hardware
from det_suite.pytest_plugin import comparisons
from det_suite.pytest_plugin.families import FAMILIES, family_cases

pytest_plugins = ["pytester"]

PLUGIN_ARGS = ("-p", "det_suite.pytest_plugin", "--strict-markers", "-ra")
UNIT_TESTS = Path(__file__).resolve().parents[1]

CPU = hardware.Snapshot(
    cuda_available=False, device_name=None, capability=None, interpreter_active=True,
    transformers=True, safetensors=True, sglang=False,
    torch_version="2.13.0+cpu", triton_version="3.6.0")
H200 = dataclasses.replace(CPU, cuda_available=True, device_name="NVIDIA H200",
                           capability=(9, 0), interpreter_active=False)
RTX_5090 = dataclasses.replace(H200, device_name="NVIDIA GeForce RTX 5090", capability=(12, 0))

# A suite with every kind of test a family's selection must or must not pick: 3 kernel
# cases per family (family_cases), a CPU lint parametrized over `family`, a
# family-agnostic GPU test, a model test, a CPU test about no family.
SUITE = '''
import pytest
from det_suite.pytest_plugin.families import family_cases

CASES = family_cases([("o-m1", (1,)), ("o-m16", (16,)), ("down-m1", (1,))])


@pytest.mark.parametrize("family, m", CASES)
def test_kernel_case(family, m):
    pass


@pytest.mark.parametrize("family", ["sm89", "sm90", "sm120"])
def test_lint_target(family):
    pass


@pytest.mark.gpu
def test_any_gpu():
    pass


@pytest.mark.model
def test_tiny_model():
    pass


def test_cpu_logic():
    pass
'''
# What `-m FAMILY` selects from SUITE: FAMILY's kernel cases need its hardware; the rest
# are selected without needing it.
SELECTED = {family: sorted([f"test_suite.py::test_kernel_case[{family}-o-m1]",
                            f"test_suite.py::test_kernel_case[{family}-o-m16]",
                            f"test_suite.py::test_kernel_case[{family}-down-m1]",
                            f"test_suite.py::test_lint_target[{family}]",
                            "test_suite.py::test_any_gpu", "test_suite.py::test_tiny_model"])
            for family in FAMILIES}


@pytest.fixture
def machine(monkeypatch):
    monkeypatch.delenv("DET_SUITE_ARCH", raising=False)

    def install(snapshot: hardware.Snapshot) -> None:
        monkeypatch.setattr(hardware, "current", lambda: snapshot)

    install(CPU)
    return install


def run(pytester, *args):
    return pytester.runpytest(*PLUGIN_ARGS, *args)


def collected(result) -> list[str]:
    return sorted(line for line in result.stdout.lines if "::" in line)


# ------------------------------------------------------------------ selection

@pytest.mark.parametrize("snapshot", [CPU, H200, RTX_5090], ids=["cpu", "h200", "rtx5090"])
@pytest.mark.parametrize("family", FAMILIES)
def test_family_marker_selects_the_family_set_on_any_machine(pytester, machine, snapshot,
                                                              family):
    machine(snapshot)
    pytester.makepyfile(test_suite=SUITE)
    result = run(pytester, "--collect-only", "-q", "-m", family)
    assert collected(result) == SELECTED[family], result.stdout.str()
    result.stdout.fnmatch_lines([f"6/12 tests collected (6 deselected)*"])


def test_sm120_selection_runs_on_an_sm12x_gpu_and_meets_the_requirement(pytester, machine):
    machine(RTX_5090)
    pytester.makepyfile(test_suite=SUITE)
    result = run(pytester, "-m", "sm120", "--det-require=sm120")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=6, deselected=6)
    # only the three cases that need SM12x hardware count for the requirement
    result.stdout.fnmatch_lines(["det-suite: --det-require=sm120: met: 3 tests ran and passed "
                                 "on NVIDIA GeForce RTX 5090 (12.0)"])


def test_other_familys_cases_skip_with_the_reason(pytester, machine):
    machine(H200)
    pytester.makepyfile(test_suite=SUITE)
    result = run(pytester, "-m", "sm120")
    result.assert_outcomes(passed=3, skipped=3, deselected=6)
    result.stdout.re_match_lines([
        r"^  sm120\s+3  needs an SM12x GPU \(compute capability 12\.x\); found NVIDIA H200",
        r"^SKIPPED \[3\] .*: sm120: needs an SM12x GPU \(compute capability 12\.x\); "
        r"found NVIDIA H200 \(9\.0\)$"])


def test_det_require_turns_the_other_familys_skips_into_a_failure(pytester, machine):
    machine(H200)
    pytester.makepyfile(test_suite=SUITE)
    result = run(pytester, "-m", "sm120", "--det-require=sm120")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["--det-require=sm120: 3 of 3 tests carrying sm120 did not "
                                 "run and pass",
                                 "3 not run (hardware), skipped by det-suite's marker check*"])


def test_selection_only_tests_cannot_meet_a_requirement(pytester, machine):
    """A run of the sm_120 lint alone (on the CPU, or even on an SM12x GPU) has tested no
    SM12x hardware."""
    machine(RTX_5090)
    pytester.makepyfile('import pytest\n\n\n@pytest.mark.parametrize("family", ["sm120"])\n'
                        'def test_lint_target(family):\n    pass\n')
    result = run(pytester, "-m", "sm120", "--det-require=sm120")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["--det-require=sm120: no test carrying sm120 was collected"])


@pytest.mark.parametrize("snapshot", [CPU, H200], ids=["cpu", "h200"])
def test_selection_only_mark_never_skips(pytester, machine, snapshot):
    machine(snapshot)
    pytester.makepyfile("import pytest\n\n\n@pytest.mark.sm120(hardware=False)\n"
                        "def test_lint():\n    pass\n")
    run(pytester, "-m", "sm120").assert_outcomes(passed=1)


@pytest.mark.parametrize("mark, expected", [
    pytest.param("sm120(hardware='no')", "takes only hardware=True or hardware=False",
                 id="non-bool-hardware"),
    pytest.param("sm90(target='sm_90')", "takes only hardware=True or hardware=False",
                 id="unknown-keyword"),
    pytest.param("gpu(hardware=False)", "only the arch markers (sm90, sm120) take hardware=",
                 id="hardware-on-a-non-arch-marker"),
])
def test_bad_marker_arguments_are_a_usage_error(pytester, machine, mark, expected):
    pytester.makepyfile(f"import pytest\n\n\n@pytest.mark.{mark}\ndef test_it():\n    pass\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*test_bad_marker_arguments_are_a_usage_error.py::test_it: "
                                 f"@pytest.mark.*{expected}*"])


def test_family_cases_ids_and_marks():
    params = family_cases([("o-m1", (1,))], marks=[pytest.mark.graph])
    assert [p.id for p in params] == [f"{family}-o-m1" for family in FAMILIES]
    assert [p.values for p in params] == [(family, 1) for family in FAMILIES]
    assert [sorted(m.name for m in p.marks) for p in params] == \
        [sorted(["gpu", family, "graph"]) for family in FAMILIES]


def test_family_cases_rejects_a_family_without_a_marker():
    with pytest.raises(ValueError, match=r"families=\['sm89'\]: \['sm89'\] have no arch marker"):
        family_cases([("o", ())], families=["sm89"])


# ------------------------------------------------------------------ the real suite

@pytest.mark.parametrize("family", FAMILIES)
def test_kernel_level_gpu_suite_has_a_case_per_id_for_each_family(pytester, machine, family):
    """The seed's SM120 file had 137 cases; each family's GPU suite has at least as many."""
    files = [str(UNIT_TESTS / name) for name in ("ops/test_fp8_linear.py",
                                                 "invariance/test_invariance_gpu.py")]
    result = run(pytester, "--collect-only", "-q", "-p", "no:cacheprovider",
                 "-m", f"{family} and gpu", *files)
    ids = [line for line in result.stdout.lines if "::" in line]
    print(f"{len(ids)} {family} GPU cases")
    assert len(ids) >= 137 and len(set(ids)) == len(ids)


# ------------------------------------------------------------------ bit-exact count

COUNTING = '''
import torch


def test_two(bit_exact):
    assert bit_exact(torch.zeros(2), torch.zeros(2))
    assert not bit_exact(torch.zeros(2), torch.ones(2))


def test_three(bit_exact):
    for _ in range(3):
        assert bit_exact(torch.ones(1), torch.ones(1))


def test_none():
    pass
'''


def test_comparison_count_is_summed_in_the_summary(pytester, machine):
    pytester.makepyfile(COUNTING)
    result = run(pytester)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["det-suite: 5 bit-exact comparisons (torch.equal) in 2 tests"])


def _report_from_a_worker(nodeid: str, compared: int):
    """A teardown report as an xdist controller receives it: serialized by the worker
    (pytest's own report JSON, what xdist sends) and rebuilt."""
    from _pytest.reports import TestReport

    report = TestReport(nodeid, ("test_x.py", 1, nodeid), {}, "passed", None, "teardown",
                        user_properties=[(comparisons.PROPERTY, compared)])
    return TestReport._from_json(report._to_json())


def test_comparison_counts_from_several_workers_are_summed():
    """Under xdist each worker's tests record their counts as a user property; the
    controller's RunState sums the reports it receives from every worker (spawning real
    workers costs ~20 s on two cores; the user property's trip is pytest's report JSON)."""
    from det_suite.pytest_plugin.settings import Settings
    from det_suite.pytest_plugin.state import RunState

    state = RunState(Settings(run_slow=False, run_perf=False, arch_as=None,
                              arch_as_source=None, require=()))
    for worker, (nodeid, compared) in enumerate([("a", 288), ("b", 16), ("c", 1)]):
        state.pytest_runtest_logreport(_report_from_a_worker(f"gw{worker}::{nodeid}",
                                                             compared))
    assert (state.bit_exact, state.bit_exact_tests) == (305, 3)


def test_comparison_count_reaches_junit_xml(pytester, machine):
    pytester.makepyfile(COUNTING)
    run(pytester, "--junitxml=junit.xml")
    properties = ET.parse(pytester.path / "junit.xml").getroot().iter("property")
    assert sorted(int(p.get("value")) for p in properties
                  if p.get("name") == comparisons.PROPERTY) == [2, 3]


def test_no_count_line_without_comparisons(pytester, machine):
    pytester.makepyfile("def test_plain():\n    pass\n")
    run(pytester).stdout.no_fnmatch_line("*bit-exact comparisons*")


def test_bit_exact_rejects_a_non_tensor():
    with pytest.raises(TypeError, match="bit_exact compares two tensors; got list and Tensor"):
        comparisons.BitExact()([0.0], __import__("torch").zeros(1))
