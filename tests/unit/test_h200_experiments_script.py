"""tools/h200_experiments.sh, the device calls behind the open sweeps of issues 10 and 15:
every tool it runs imports and offers the options its step passes, a phase records each
step's exit status and time, and usage errors exit 2 before anything runs."""

import os
import subprocess
import sys

import pytest

from det_suite.reports.provenance import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "h200_experiments.sh"


def _run(args, out=None):
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_every_step_parses(tmp_path):
    done = _run(["flags"])
    assert done.returncode == 0, done.stderr
    steps = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("ok:")]
    assert steps == ["decode_schedule:", "attention_sweep:", "promotion_named:",
                     "promotion_unnamed:", "pingpong_smoke:", "pingpong:"]


@pytest.mark.parametrize("args, out, message", [
    (["bogus"], "set", "usage:"),
    ([], "set", "usage:"),
    (["step"], None, "set OUT"),
], ids=["unknown-phase", "no-phase", "no-out"])
def test_a_usage_error_runs_nothing(tmp_path, args, out, message):
    done = _run(args, tmp_path / "out" if out else None)
    assert done.returncode != 0
    assert message in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_phase_records_each_steps_status(tmp_path, kernel_device):
    # Where there is no GPU each sweep refuses at once (exit 2): the phase still records it.
    if kernel_device != "cpu":
        pytest.skip("on a GPU this would run the sweep itself")
    done = _run(["gemm-named"], tmp_path)
    assert done.returncode == 1
    name, status, _seconds = (tmp_path / "steps.tsv").read_text().split()
    assert (name, status) == ("promotion_named", "2")
    assert "no CUDA device here" in (tmp_path / "promotion_named.log").read_text()


def test_the_pingpong_phase_refuses_without_an_sm90_gpu_in_both_steps(tmp_path, kernel_device):
    if kernel_device != "cpu":
        pytest.skip("on a GPU this would run the sweep itself")
    done = _run(["gemm-pingpong"], tmp_path)
    assert done.returncode == 1
    rows = [line.split("\t") for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    assert [(name, status) for name, status, _seconds in rows] == [
        ("pingpong_smoke", "2"), ("pingpong", "2")]
    assert "needs an SM90 GPU" in (tmp_path / "pingpong.log").read_text()
