"""gpu-suite orchestration logic that needs no GPU."""

import pytest

from det_suite.cli import main
from det_suite.checks.gpu_suite import (GpuSuiteSettings, junit_counts, run_gpu_suite,
                                        step_commands)


def test_unknown_step_is_a_usage_error(tmp_path, capsys):
    assert main(["gpu-suite", "--out", str(tmp_path), "--steps", "pytest,fuzz"]) == 2
    assert "unknown step(s) ['fuzz']" in capsys.readouterr().err


@pytest.mark.parametrize("xml,expected", [
    ('<testsuites><testsuite tests="5" failures="1" errors="0" skipped="2"/></testsuites>',
     {"tests": 5, "failures": 1, "errors": 0, "skipped": 2, "passed": 2}),
    ('<testsuite tests="3" failures="0" errors="1" skipped="0"/>',
     {"tests": 3, "failures": 0, "errors": 1, "skipped": 0, "passed": 2}),
], ids=["testsuites-root", "testsuite-root"])
def test_junit_counts_separate_skips_from_passes(tmp_path, xml, expected):
    path = tmp_path / "junit.xml"
    path.write_text(xml)
    assert junit_counts(path) == expected


def test_missing_junit_counts_as_not_run(tmp_path):
    assert junit_counts(tmp_path / "junit.xml") is None


def test_a_failing_step_fails_the_suite_and_writes_the_summary(tmp_path):
    # CUDA_VISIBLE_DEVICES="" makes `bench gemm` refuse (no GPU) on any machine; the suite's
    # own up-front refusal is switched off to reach the step.
    settings = GpuSuiteSettings(out=str(tmp_path), steps=["bench"], require_gpu=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDA_VISIBLE_DEVICES", "")
        result = run_gpu_suite(settings, log=lambda line: None)
    assert (result.ok, result.summary["steps"][0]["exit_code"]) == (False, 2)
    summary = (tmp_path / "gpu_suite.json").read_text()
    assert '"ok": false' in summary


@pytest.mark.parametrize("item", ["bench", "bench=abc", "fuzz=10", "pytest=0"],
                         ids=["no-seconds", "not-a-number", "unknown-step", "zero"])
def test_bad_step_timeout_is_a_usage_error(tmp_path, capsys, item):
    assert main(["gpu-suite", "--out", str(tmp_path), "--step-timeout", item]) == 2
    assert "--step-timeout" in capsys.readouterr().err


def test_bench_args_reach_the_bench_step(tmp_path):
    settings = GpuSuiteSettings(out=str(tmp_path),
                                bench_args="--max-geomean 1.10 --max-cell 1.3")
    bench = step_commands(tmp_path, settings)["bench"]
    assert bench[-4:] == ["--max-geomean", "1.10", "--max-cell", "1.3"]
