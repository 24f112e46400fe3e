"""What code produced a result, and whether a tree still holds that code.

Every results file (invariance, bench, gpu-suite, lint, tune) records `revision()` and
`source_hashes()`: the commit, whether the tree was clean (else a hash of the difference),
and the sha256 of every source file of det-suite - the package, its tests, its tools. A
reviewer (or `tests/repo/test_evidence.py`) can then tell whether committed evidence still
describes HEAD: `stale_files(recorded)` names every file whose bytes changed since.

A GPU machine often gets a copy of the working tree without a trustworthy `.git` (no
history, or a stale one). The command that sends it there passes the commit and the
difference's hash in `DET_SUITE_REVISION` (as `format_revision(git_state())` writes it), which
then wins over whatever git says on the copy; the per-file hashes say what really ran.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
REPO_ROOT = PACKAGE_ROOT.parent
REVISION_ENV = "DET_SUITE_REVISION"
# Source files of det-suite, relative to the repository root: what a result depends on.
SOURCE_GLOBS = ("det_suite/**/*.py", "det_suite/**/*.json", "tests/**/*.py", "tools/*.py",
                "tools/*.sh", "tools/*.toml", "benchmarks/**/*.py", "pyproject.toml")
_GIT_TIMEOUT_S = 10


def _source_files(root: Path) -> list[Path]:
    files = set()
    for pattern in SOURCE_GLOBS:
        files.update(p for p in root.glob(pattern)
                     if p.is_file() and "__pycache__" not in p.parts)
    return sorted(files)


def source_hashes(root: str | os.PathLike | None = None) -> dict[str, str]:
    """sha256 of every det-suite source file under `root` (default: this checkout), keyed
    by its path relative to root. An installed package without tests/ hashes what it has."""
    root = Path(root) if root is not None else REPO_ROOT
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in _source_files(root)}


def tree_sha256(hashes: dict[str, str]) -> str:
    """One digest for a set of file hashes (order-independent)."""
    text = "".join(f"{path}\0{digest}\n" for path, digest in sorted(hashes.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _git(*args: str, root: Path) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True,
                              timeout=_GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(root: str | os.PathLike | None = None) -> dict | None:
    """{"commit", "clean", "diff_sha256"} of the checkout at root, from git; None outside a
    git checkout. The difference covers tracked changes (`git diff HEAD`) and the names and
    bytes of untracked, not ignored files, so two trees with the same diff hash hold the
    same code."""
    root = Path(root) if root is not None else REPO_ROOT
    head = _git("rev-parse", "HEAD", root=root)
    if head is None or head.returncode != 0 or not head.stdout.strip():
        return None
    diff = _git("diff", "HEAD", "--binary", root=root)
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z", root=root)
    if diff is None or untracked is None or diff.returncode or untracked.returncode:
        return {"commit": head.stdout.decode().strip(), "clean": False, "diff_sha256": None}
    digest = hashlib.sha256(diff.stdout)
    names = sorted(n for n in untracked.stdout.decode().split("\0") if n)
    for name in names:
        digest.update(b"\0untracked\0" + name.encode())
        path = root / name
        if path.is_file():
            digest.update(path.read_bytes())
    clean = not diff.stdout and not names
    return {"commit": head.stdout.decode().strip(), "clean": clean,
            "diff_sha256": None if clean else digest.hexdigest()}


def format_revision(state: dict | None) -> str | None:
    """'<commit>' for a clean tree, '<commit>+diff.<12 hex>' otherwise."""
    if state is None:
        return None
    if state["clean"]:
        return state["commit"]
    suffix = state["diff_sha256"][:12] if state.get("diff_sha256") else "unknown"
    return f"{state['commit']}+diff.{suffix}"


def revision(root: str | os.PathLike | None = None) -> dict:
    """The revision a result records: DET_SUITE_REVISION when the sender set it (source
    "sender"), else git's view of this tree (source "git"), else unknown."""
    sent = os.environ.get(REVISION_ENV, "").strip()
    if sent:
        commit, _, diff = sent.partition("+diff.")
        return {"revision": sent, "commit": commit, "clean": not diff,
                "diff_sha256_prefix": diff or None, "source": "sender"}
    state = git_state(root)
    if state is None:
        return {"revision": None, "commit": None, "clean": None, "diff_sha256_prefix": None,
                "source": "unknown (no git checkout, DET_SUITE_REVISION unset)"}
    return {"revision": format_revision(state), "commit": state["commit"],
            "clean": state["clean"],
            "diff_sha256_prefix": state["diff_sha256"][:12] if state["diff_sha256"] else None,
            "source": "git"}


def stale_files(recorded: dict[str, str], paths=None,
                root: str | os.PathLike | None = None,
                current: dict[str, str] | None = None) -> dict[str, str]:
    """Files among `paths` (default: all recorded) whose bytes differ from the recorded
    hash, or that are gone or new since: path -> what changed. `current`: the tree's
    `source_hashes(root)` when the caller already has them."""
    if current is None:
        current = source_hashes(root)
    paths = set(recorded) if paths is None else set(paths)
    stale = {}
    for path in sorted(paths):
        if path not in recorded:
            stale[path] = "not recorded"
        elif path not in current:
            stale[path] = "deleted since"
        elif current[path] != recorded[path]:
            stale[path] = "changed since"
    return stale
