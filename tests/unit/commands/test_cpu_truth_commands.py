"""The rough edges a new user hit on a CPU machine (issue 10): `gpu-suite` refuses at once,
invariance reports land in the ignored results/ folder with ordinary file modes, and
`lint-policy` shows the README's SM90 claim with its defaults."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from det_suite.checks import gpu_suite as gpu_suite_check
from det_suite.cli import build_parser, main
from det_suite.commands import lint_policy
from det_suite.invariance.harness import InvarianceSettings
from det_suite.reports.files import write_bytes_atomic, write_json_atomic

REPO = Path(__file__).resolve().parents[2]
REFUSAL = "gpu-suite needs a CUDA GPU; found none: nothing was run"


# ---------------------------------------------------------------- gpu-suite without a GPU

def test_gpu_suite_without_a_gpu_refuses_before_running_or_writing_anything(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    started = []
    monkeypatch.setattr(gpu_suite_check.subprocess, "run", lambda *a, **k: started.append(a))
    assert main(["gpu-suite", "--out", str(tmp_path / "out")]) == 2
    assert REFUSAL in capsys.readouterr().err
    assert (started, (tmp_path / "out").exists()) == ([], False)


def test_gpu_suite_command_on_a_cpu_machine_exits_within_seconds(tmp_path):
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this is a CPU machine on a GPU runner too.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "det_suite", "gpu-suite", "--out",
                           str(tmp_path / "out")], env=env, capture_output=True, text=True,
                          timeout=300)
    seconds = time.monotonic() - started
    assert (done.returncode, REFUSAL in done.stderr) == (2, True), done.stderr
    # Python, torch and the CLI start in a few seconds; the full matrix took 5+ minutes.
    assert seconds < 60, f"took {seconds:.0f} s"


# ---------------------------------------------------------------- where reports go

def test_invariance_reports_default_to_the_results_folder():
    args = build_parser().parse_args(["invariance"])
    assert args.out == InvarianceSettings().out == "results/invariance"


def test_the_default_invariance_folder_is_git_ignored():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of det-suite")
    path = f"{InvarianceSettings().out}/invariance.json"
    done = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", path])
    assert done.returncode == 0, f"{path} is not ignored by .gitignore"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)],
                         ids=["umask-022", "umask-002", "umask-077"])
def test_reports_get_the_mode_a_plain_open_would_give(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        path = write_json_atomic(tmp_path / "report.json", {"ok": True})
    finally:
        os.umask(previous)
    assert oct(stat.S_IMODE(path.stat().st_mode)) == oct(mode)


def test_atomic_write_replaces_and_leaves_no_temporary_file(tmp_path):
    write_bytes_atomic(tmp_path / "r.txt", b"old")
    write_bytes_atomic(tmp_path / "r.txt", b"new")
    assert [p.name for p in tmp_path.iterdir()] == ["r.txt"]
    assert (tmp_path / "r.txt").read_bytes() == b"new"


# ---------------------------------------------------------------- lint-policy's control

def test_lint_policy_defaults_show_the_seed_table_flagged_on_sm90(tmp_path, capsys):
    path = tmp_path / "lint.json"
    assert main(["lint-policy", "--family", "sm89", "--json", str(path)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("positive control:")]
    assert "compiled for sm_90 is flagged, as it must be" in line
    assert "mma.sync" in line and "wgmma" in line  # the two instruction families it mixes
    assert json.loads(path.read_text())["positive_control"]["flagged"] is True


def test_lint_policy_fails_when_the_control_is_not_flagged(monkeypatch, capsys):
    # On SM12x all of the seed's tiles compile to one mma.sync: nothing to flag there.
    monkeypatch.setattr(lint_policy, "CONTROL_ARCH", "sm_120")
    assert main(["lint-policy", "--family", "sm89"]) == 1
    assert "compiled for sm_120 was NOT flagged: FAILED" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--no-control"], ["--arch", "sm_89"]],
                         ids=["no-control", "explicit-arch"])
def test_lint_policy_control_can_be_left_out(capsys, argv):
    assert main(["lint-policy", "--family", "sm89", *argv]) == 0
    assert "positive control" not in capsys.readouterr().out
