"""tools/gpu_model_runs.sh, the GPU calls behind the model-level report: every command
line it runs parses with det-suite's own parser (a renamed or removed flag fails here, on a
CPU, not in a device call), and usage errors exit 2 before anything runs."""

import os
import subprocess
import sys

import pytest

from det_suite.reports.provenance import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "gpu_model_runs.sh"


def _run(args, tmp_path, **env):
    full = {**os.environ, "PYTHON": sys.executable, **env}
    if env.get("OUT", "set") == "set":
        full["OUT"] = str(tmp_path / "out")
    else:
        full.pop("OUT", None)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=full, timeout=300)


@pytest.mark.parametrize("smoke", ["0", "1"], ids=["h200", "cpu-rehearsal"])
def test_every_command_line_parses(tmp_path, smoke):
    done = _run(["flags"], tmp_path, SMOKE=smoke)
    assert done.returncode == 0, done.stderr
    commands = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("ok:")]
    others = 1 if smoke == "1" else 3   # the models phase: one cache-hit per other model
    assert commands == ["gsm8k", "gsm8k", "compare", "bench", "cache-hit", "invariance",
                        "report"] + ["cache-hit"] * others


def test_the_models_phase_runs_the_other_qwen3_shapes(tmp_path):
    out = _run(["flags"], tmp_path).stdout
    assert "--model synthetic:qwen3-4b?seed=0 --modes det,stock --engines graph" in out
    assert "--model synthetic:qwen3-14b?seed=0 --modes det,stock --engines graph" in out
    assert "--model synthetic:qwen3-32b?seed=0 --modes det --engines graph" in out


def test_the_h200_lines_are_the_ones_asked_for(tmp_path):
    out = _run(["flags"], tmp_path).stdout
    assert "--model synthetic:qwen3-8b?seed=0 --mode det --preset full --engine graph" in out
    assert "--max-ratio 1.05 --max-decode-floor-ratio 1.5" in out
    assert "--screenshot" not in out


@pytest.mark.parametrize("args, env, message", [
    (["bogus"], {}, "unknown phase 'bogus'"),
    (["gsm8k"], {"OUT": None}, "usage: OUT=DIR"),
], ids=["unknown-phase", "no-out"])
def test_usage_errors_exit_2_and_run_nothing(tmp_path, args, env, message):
    done = _run(args, tmp_path, **env)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "out" / "gsm8k").exists()
