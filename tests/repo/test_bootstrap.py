"""./bootstrap installs the CPU torch build it promises (issue 38): PyTorch's CPU index is
added to the indexes pip already has when it answers, and bootstrap fails, saying what was
installed, unless torch.version.cuda is None afterwards. Run against a stand-in .venv whose
python fakes pip and torch, so nothing is installed anywhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGURED = "file:///local/simple"

FAKE_PYTHON = textwrap.dedent("""\
    #!/bin/sh
    # pip config list / pip install / the index probe / `python -c` reading torch's version.
    case "$1 $2 $3" in
      "-m pip config") echo "global.extra-index-url='$FAKE_CONFIGURED'"; exit 0 ;;
      "-m pip install") echo "${PIP_EXTRA_INDEX_URL-unset}" >> "$FAKE_LOG"; exit 0 ;;
    esac
    if [ "$1" = "-" ]; then cat > /dev/null; exit "$FAKE_PROBE_RC"; fi
    if [ "$1" = "-c" ]; then PYTHONPATH="$FAKE_TORCH" exec "$REAL_PYTHON" "$@"; fi
    exit 0
    """)


def _bootstrap(tmp_path, *, cuda, reachable):
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copy(ROOT / "bootstrap", work / "bootstrap")
    (work / ".venv" / "bin").mkdir(parents=True)
    python = work / ".venv" / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    torch = tmp_path / "fake" / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text(
        f"__version__ = {'2.13.0+cu130' if cuda else '2.13.0+cpu'!r}\n"
        f"class version:\n    cuda = {'13.0' if cuda else None!r}\n")
    log = tmp_path / "pip.log"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
           "FAKE_CONFIGURED": CONFIGURED, "FAKE_LOG": str(log),
           "FAKE_PROBE_RC": "0" if reachable else "1", "FAKE_TORCH": str(tmp_path / "fake"),
           "REAL_PYTHON": sys.executable, "TORCH_CPU_INDEX": "https://cpu.example/whl"}
    done = subprocess.run(["bash", str(work / "bootstrap")], env=env, capture_output=True,
                          text=True, timeout=60)
    indexes = log.read_text().splitlines() if log.exists() else []
    return done, indexes


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_reachable_cpu_index_is_added_to_the_configured_ones(tmp_path):
    done, indexes = _bootstrap(tmp_path, cuda=False, reachable=True)
    assert done.returncode == 0, done.stderr
    assert indexes[0] == f"{CONFIGURED} https://cpu.example/whl"
    assert "torch 2.13.0+cpu is the CPU build" in done.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_an_unreachable_cpu_index_falls_back_to_the_configured_indexes(tmp_path):
    done, indexes = _bootstrap(tmp_path, cuda=False, reachable=False)
    assert done.returncode == 0, done.stderr
    assert indexes[0] == "unset"
    assert "(https://cpu.example/whl) is not reachable" in done.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_cuda_torch_fails_bootstrap_saying_what_was_installed(tmp_path):
    done, indexes = _bootstrap(tmp_path, cuda=True, reachable=False)
    assert done.returncode == 1
    assert "torch 2.13.0+cu130, a CUDA build (CUDA 13.0); expected the CPU build" in done.stderr
    assert "was not reachable" in done.stderr
    assert len(indexes) == 1   # det-suite itself was not installed over the wrong torch
