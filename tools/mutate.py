#!/usr/bin/env python3
"""Targeted mutation testing for det-suite's kernels, ops and tile policy.

Applies one hand-written source mutation at a time (tools/mutations.toml) to a fresh copy of
the tracked tree, runs the tests against it, and reports which mutants the tests kill and
which survive. A surviving mutant is a bug the test selection cannot see.

    .venv/bin/python tools/mutate.py --list
    .venv/bin/python tools/mutate.py --only split-k-fixup-reverse \\
        --pytest-args "-x -q -p no:cacheprovider tests/unit/ops/test_fp8_linear.py"
    .venv/bin/python tools/mutate.py                  # every CPU-visible mutant, tests/unit

How a run works
---------------
1. The tracked files (`git ls-files`, as they are in the working tree, uncommitted edits
   included; --include-untracked adds untracked files that git does not ignore) are copied
   once into a snapshot under a temporary folder. Every copy below is taken from that
   snapshot, so edits made to the checkout while a campaign runs do not mix into it.
2. Baseline: an unmutated copy must pass the test command, and `import det_suite` run inside
   a copy must resolve to the copy (not to the editable install's checkout); otherwise the
   run stops with exit code 2.
3. Per mutation: a fresh copy, the `old` text (which must occur exactly once in its file,
   or the mutant is "not-applied") replaced by `new`, the test command run in the copy with
   PYTHONPATH=<copy>, meta-tests (marker `meta`) deselected. Non-zero exit: killed (first
   failing test from pytest's junit XML, reported as the mutant's killer);
   zero: survived; over --timeout: timeout. The copy is deleted afterwards.
4. The report (JSON and Markdown, written atomically after every mutant, so an interrupted
   campaign leaves a valid partial report) goes to --out.

Exit code: 0 when no mutant survived, 1 when one did (with --strict also on a timeout or a
not-applied mutant), 2 on a setup error (bad mutation list, failing baseline, ...).

Only the standard library is needed to run the tool; the tests run with the main checkout's
.venv/bin/python (--python), with the copy first on sys.path.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from det_suite.reports.files import write_json_atomic, write_text_atomic

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MUTATIONS = REPO_ROOT / "tools" / "mutations.toml"
DEFAULT_OUT = Path("mutation-report")
DEFAULT_PYTEST_ARGS = "-x -q -n 2 -p no:cacheprovider tests/unit"
# Tests that fail on an edit to certain text whatever the code computes (the README block's
# staleness, every mutant applying): deselected, so a kill is always a behavioural test's.
META_MARKER = "meta"
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_VERIFY_IMPORT = "det_suite"
# Placeholders a --test-command may use; the pytest command uses both.
PYTHON_PLACEHOLDER = "{python}"
JUNIT_PLACEHOLDER = "{junit}"

CATEGORIES = {
    "schedule": "a reduction's grouping or order changes (e.g. with M, or between launch "
                "shapes of one op)",
    "masking": "a load or store mask is wrong: tails read garbage, padding is written",
    "rounding": "a quantizer or elementwise step rounds, divides, clamps or handles NaN "
                "wrongly",
    "epilogue": "scale/bias application, FP contraction or a sign in an op's last step",
    "pdl": "programmatic dependent launch ordering (GPU only)",
    "cache": "the prefix cache keys, matches, evicts or releases pages wrongly",
    "harness": "a check claims more than it compared (a tolerance, a hit it did not prove)",
    "timing": "the A/B timing reports other than it measured (ratio, warm-up, thermal gate)",
    "engine": "the embedded engine packs a step wrongly (context lengths, scored tokens, "
              "KV slots)",
}
# Outcomes of one mutant. The first three ran; the others did not.
STATUSES = ("killed", "survived", "timeout", "not-applied", "gpu-only", "equivalent")
REQUIRED_FIELDS = ("name", "category", "file", "old", "new", "why")
OPTIONAL_FIELDS = {"needs_gpu": bool, "equivalent": str}
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MUTATIONS_HINT = "update tools/mutations.toml"


class MutateError(Exception):
    """A setup problem: the run cannot produce a meaningful report (exit code 2)."""


class NotApplied(Exception):
    """The mutation's `old` text is not in its file exactly once."""


# ---------------------------------------------------------------- the mutation list

@dataclass(frozen=True)
class Mutation:
    name: str
    category: str
    file: str
    old: str
    new: str
    why: str
    needs_gpu: bool = False
    equivalent: str | None = None


def load_mutations(path: str | os.PathLike = DEFAULT_MUTATIONS) -> list[Mutation]:
    """Parse and validate the mutation list; every problem is reported at once."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MutateError(f"{path}: cannot read the mutation list: {exc}") from exc
    entries = data.get("mutation")
    if not isinstance(entries, list) or not entries:
        raise MutateError(f"{path}: expected one or more [[mutation]] tables")
    errors, mutations, seen = [], [], set()
    for index, entry in enumerate(entries, 1):
        where = f"{path}: mutation #{index}" + (f" ({entry.get('name')})"
                                                 if isinstance(entry.get("name"), str) else "")
        problems = []
        for key in REQUIRED_FIELDS:
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                problems.append(f"'{key}' must be a non-empty string")
        for key, kind in OPTIONAL_FIELDS.items():
            if key in entry and not isinstance(entry[key], kind):
                problems.append(f"'{key}' must be a {kind.__name__}")
        unknown = sorted(set(entry) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
        if unknown:
            problems.append(f"unknown field(s) {', '.join(unknown)}")
        if not problems:
            if not NAME_PATTERN.match(entry["name"]):
                problems.append("'name' must be lower-case words joined by '-'")
            elif entry["name"] in seen:
                problems.append(f"duplicate name {entry['name']!r}")
            if entry["category"] not in CATEGORIES:
                problems.append(f"unknown category {entry['category']!r} (known: "
                                f"{', '.join(CATEGORIES)})")
            file = Path(entry["file"])
            if file.is_absolute() or ".." in file.parts or "\\" in entry["file"]:
                problems.append("'file' must be a relative path inside the repository")
            if entry["old"] == entry["new"]:
                problems.append("'old' and 'new' are identical")
            if entry.get("needs_gpu") and entry.get("equivalent"):
                problems.append("a mutant is either needs_gpu or equivalent, not both")
        if problems:
            errors.append(f"{where}: " + "; ".join(problems))
            continue
        seen.add(entry["name"])
        mutations.append(Mutation(**{k: entry[k] for k in REQUIRED_FIELDS},
                                  needs_gpu=entry.get("needs_gpu", False),
                                  equivalent=entry.get("equivalent")))
    if errors:
        raise MutateError("invalid mutation list:\n  " + "\n  ".join(errors))
    return mutations


def select_mutations(mutations: list[Mutation], only: str | None = None,
                     category: str | None = None) -> list[Mutation]:
    """--only NAME[,NAME] and --category CAT[,CAT]; both given: mutations matching both."""
    selected = list(mutations)
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        known = {m.name for m in mutations}
        missing = [n for n in names if n not in known]
        if missing:
            raise MutateError(f"unknown mutation(s) {', '.join(missing)}; --list shows them")
        selected = [m for m in selected if m.name in names]
    if category:
        cats = [c.strip() for c in category.split(",") if c.strip()]
        unknown = [c for c in cats if c not in CATEGORIES]
        if unknown:
            raise MutateError(f"unknown category {', '.join(unknown)} (known: "
                              f"{', '.join(CATEGORIES)})")
        selected = [m for m in selected if m.category in cats]
    if not selected:
        raise MutateError("the selection matches no mutation")
    return selected


def count_occurrences(text: str, old: str) -> int:
    """How often `old` occurs in `text`, overlapping occurrences included."""
    count, start = 0, text.find(old)
    while start != -1:
        count += 1
        start = text.find(old, start + 1)
    return count


def check_mutation(mutation: Mutation, root: str | os.PathLike) -> str | None:
    """None when the mutation applies to the tree at `root`, else why it does not."""
    path = Path(root) / mutation.file
    if not path.is_file():
        return f"source changed: {mutation.file} does not exist; {MUTATIONS_HINT}"
    count = count_occurrences(path.read_bytes().decode("utf-8"), mutation.old)
    if count != 1:
        return (f"source changed: 'old' text occurs {count} times in {mutation.file} "
                f"(expected exactly once); {MUTATIONS_HINT}")
    return None


def mutated_source(mutation: Mutation, text: str) -> str:
    if count_occurrences(text, mutation.old) != 1:
        raise NotApplied(f"'old' text does not occur exactly once in {mutation.file}")
    return text.replace(mutation.old, mutation.new, 1)


def apply_mutation(mutation: Mutation, root: str | os.PathLike) -> Path:
    """Rewrite `mutation.file` under `root` (a copy!), byte-exact apart from the edit."""
    reason = check_mutation(mutation, root)
    if reason:
        raise NotApplied(reason)
    path = Path(root) / mutation.file
    path.write_bytes(mutated_source(mutation, path.read_bytes().decode("utf-8")).encode("utf-8"))
    return path


# ---------------------------------------------------------------- copies of the tree

def _git(repo: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MutateError(f"git {' '.join(args)} failed in {repo}: {exc}") from exc
    if out.returncode != 0:
        raise MutateError(f"git {' '.join(args)} failed in {repo}: "
                          f"{out.stderr.decode(errors='replace').strip()}")
    return out.stdout.decode("utf-8", errors="surrogateescape")


def tree_files(repo: str | os.PathLike, include_untracked: bool = False) -> list[str]:
    """Tracked paths (and, optionally, untracked non-ignored ones), relative to `repo`.
    Outside a git checkout (a GPU machine's copy of the tree) every det-suite source file
    (det_suite.reports.provenance.SOURCE_GLOBS) instead."""
    repo = Path(repo)
    try:
        files = set(_git(repo, "ls-files", "-z", "--cached").split("\0"))
    except MutateError:
        from det_suite.reports.provenance import source_hashes

        return sorted(source_hashes(repo))
    if include_untracked:
        files |= set(_git(repo, "ls-files", "-z", "--others", "--exclude-standard").split("\0"))
    return sorted(f for f in files if f)


def copy_tree(repo: str | os.PathLike, dest: str | os.PathLike, files: list[str]) -> Path:
    """Copy `files` as they are in the working tree now (edits included; files deleted from
    the working tree and submodule folders are skipped)."""
    repo, dest = Path(repo), Path(dest)
    dest.mkdir(parents=True, exist_ok=False)
    for rel in files:
        src, dst = repo / rel, dest / rel
        if src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return dest


def git_revision(repo: str | os.PathLike) -> str | None:
    """The revision results record (det_suite.reports.provenance): HEAD, '+diff.<hash>' when the
    copies hold changes; DET_SUITE_REVISION where the sender set it."""
    from det_suite.reports.provenance import revision

    return revision(repo)["revision"]


def test_environment(copy: Path) -> dict[str, str]:
    env = os.environ.copy()
    env["PYTHONPATH"] = str(copy) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                     else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def verify_import_resolves_to_copy(python: str, copy: Path, package: str) -> Path:
    """`import package` inside the copy must load the copy's package, or every mutant would
    test the unmutated checkout (an editable install points at it) and survive."""
    code = f"import {package}, os; print(os.path.realpath({package}.__file__))"
    try:
        out = subprocess.run([python, "-c", code], cwd=copy, env=test_environment(copy),
                             capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MutateError(f"cannot run {python}: {exc}") from exc
    if out.returncode != 0:
        raise MutateError(f"`import {package}` fails inside the copy {copy}:\n"
                          f"{out.stderr.strip()[-2000:]}")
    lines = out.stdout.strip().splitlines()
    location = Path(lines[-1] if lines else "")
    if not location.is_relative_to(copy.resolve()):
        raise MutateError(f"`import {package}` inside the copy resolves to {location}, not to "
                          f"the copy {copy}: mutants would test the wrong tree. Check "
                          "PYTHONPATH handling / how the package is installed.")
    return location


# ---------------------------------------------------------------- running tests

@dataclass
class TestRun:
    outcome: str  # "passed", "failed" or "timeout"
    returncode: int | None
    first_failure: str | None
    wall_s: float
    log: str


def pytest_command(pytest_args: str) -> list[str]:
    """pytest with `pytest_args`, meta-tests deselected (a `-m` expression given is kept and
    narrowed), and the junit path to read the killing test from."""
    args = shlex.split(pytest_args)
    selection = f"not {META_MARKER}"
    while "-m" in args[:-1]:
        at = args.index("-m")
        selection = f"({args[at + 1]}) and {selection}"
        del args[at:at + 2]
    return [PYTHON_PLACEHOLDER, "-m", "pytest", *args, "-m", selection,
            f"--junitxml={JUNIT_PLACEHOLDER}"]


def _expand(command: list[str], python: str, junit: Path | str) -> list[str]:
    return [part.replace(PYTHON_PLACEHOLDER, python).replace(JUNIT_PLACEHOLDER, str(junit))
            for part in command]


def display_command(command: list[str], python: str) -> str:
    """The command as a shell line, with the interpreter filled in (the junit path differs
    per mutant and stays a placeholder)."""
    return shlex.join(_expand(command, python, "JUNIT.xml"))


def _junit_case_id(case: ET.Element, root: Path) -> str:
    """pytest's node id from a junit <testcase>: classname 'tests.unit.test_x.TestY' is a
    module path followed by classes; the longest prefix naming a .py file is the module."""
    classname, name = case.get("classname", ""), case.get("name", "")
    if case.get("file"):  # junit_family=xunit1
        parts = classname.split(".")
        module = Path(case.get("file")).with_suffix("").parts
        classes = parts[len(module):] if tuple(parts[:len(module)]) == module else []
        return "::".join([case.get("file"), *classes, name])
    if not classname:  # collection error: name is the module's dotted path
        parts = name.split(".")
        candidate = "/".join(parts) + ".py"
        return (candidate if (root / candidate).is_file() else name) + " (collection error)"
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = "/".join(parts[:cut]) + ".py"
        if (root / module).is_file():
            return "::".join([module, *parts[cut:], name])
    return f"{classname}::{name}"


def first_failure_from_junit(path: str | os.PathLike, root: str | os.PathLike) -> str | None:
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError):
        return None
    for case in tree.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            return _junit_case_id(case, Path(root))
    return None


_SUMMARY_LINE = re.compile(r"^(FAILED|ERROR) (\S+)")


def first_failure_from_output(text: str) -> str | None:
    """Fallback (no junit file: crash, timeout): pytest's -r short summary lines."""
    for line in text.splitlines():
        match = _SUMMARY_LINE.match(line.strip())
        if match:
            return match.group(2)
    return None


def _kill_group(proc: subprocess.Popen) -> None:
    # The command runs in its own session (start_new_session), so its process group id is
    # its pid: this ends it and its children (xdist workers), nothing else.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_test_command(command: list[str], copy: Path, python: str, timeout_s: float,
                     scratch: Path) -> TestRun:
    """Run `command` in `copy` with the copy first on PYTHONPATH."""
    scratch.mkdir(parents=True, exist_ok=True)
    junit, log_path = scratch / "junit.xml", scratch / "output.log"
    for stale in (junit, log_path):
        if stale.exists():
            stale.unlink()
    start = time.monotonic()
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(_expand(command, python, junit), cwd=copy,
                                    env=test_environment(copy), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            raise MutateError(f"cannot start the test command: {exc}") from exc
        try:
            returncode = proc.wait(timeout=timeout_s)
            outcome = "passed" if returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            returncode, outcome = None, "timeout"
        except BaseException:
            _kill_group(proc)
            raise
    wall = time.monotonic() - start
    text = log_path.read_bytes().decode("utf-8", errors="replace")
    failure = None
    if outcome == "failed":
        failure = first_failure_from_junit(junit, copy) or first_failure_from_output(text)
    return TestRun(outcome, returncode, failure, wall, text)


# ---------------------------------------------------------------- results and report

@dataclass
class Result:
    name: str
    category: str
    file: str
    status: str
    detail: str = ""
    killed_by: str | None = None
    returncode: int | None = None
    wall_s: float | None = None
    why: str = ""
    old: str = ""
    new: str = ""


@dataclass
class Campaign:
    repo: str
    git_revision: str | None
    mutations_file: str
    command: list[str]
    python: str
    timeout_s: float
    include_gpu: bool
    include_equivalent: bool
    started_utc: str
    baseline: dict = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    planned: int = 0
    finished_utc: str | None = None

    def totals(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for result in self.results:
            counts[result.status] += 1
        counts["total"] = len(self.results)
        return counts

    def score(self) -> float | None:
        """killed / (killed + survived + timeout): of the mutants that ran, how many the
        tests caught. Timeouts count against it: a hang is not a failing test."""
        t = self.totals()
        ran = t["killed"] + t["survived"] + t["timeout"]
        return t["killed"] / ran if ran else None

    def payload(self) -> dict:
        return {
            "tool": "tools/mutate.py",
            "complete": self.finished_utc is not None and len(self.results) == self.planned,
            "repo": self.repo,
            "git_revision": self.git_revision,
            "mutations_file": self.mutations_file,
            "test_command": self.command,
            "python": self.python,
            "timeout_s": self.timeout_s,
            "include_gpu": self.include_gpu,
            "include_equivalent": self.include_equivalent,
            "started_utc": self.started_utc,
            "finished_utc": self.finished_utc,
            "baseline": self.baseline,
            "planned": self.planned,
            "totals": self.totals(),
            "mutation_score": self.score(),
            "results": [asdict(r) for r in self.results],
        }


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _status_text(result: Result) -> str:
    if result.status == "killed":
        return f"killed by {result.killed_by}" if result.killed_by else \
            f"killed ({result.detail})"
    if result.status in ("not-applied", "gpu-only", "equivalent", "timeout"):
        return f"{result.status} ({result.detail})"
    return result.status


def render_markdown(campaign: Campaign) -> str:
    p = campaign.payload()
    t = p["totals"]
    score = p["mutation_score"]
    lines = [
        "# Mutation testing report",
        "",
        f"- revision: `{p['git_revision']}`",
        f"- test command: `{display_command(p['test_command'], p['python'])}` (run in each "
        f"mutant's copy, timeout {p['timeout_s']:g} s per mutant)",
        f"- baseline (unmutated copy): {p['baseline'].get('status', 'not run')}"
        + (f" in {p['baseline']['wall_s']:.0f} s" if p["baseline"].get("wall_s") is not None
           else ""),
        f"- started {p['started_utc']}, finished {p['finished_utc'] or '(still running)'}"
        + ("" if p["complete"] else f" - INCOMPLETE: {len(campaign.results)} of "
           f"{p['planned']} mutants done"),
        f"- totals: {t['total']} mutants: " + ", ".join(f"{t[s]} {s}" for s in STATUSES),
        "- mutation score (killed / mutants that ran): "
        + (f"{score:.0%}" if score is not None else "n/a (none ran)"),
        "",
        "| # | mutation | category | file | status | wall |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(campaign.results, 1):
        wall = f"{r.wall_s:.0f} s" if r.wall_s is not None else ""
        lines.append(f"| {i} | `{r.name}` | {r.category} | `{r.file}` | "
                     f"{_cell(_status_text(r))} | {wall} |")
    survivors = [r for r in campaign.results if r.status in ("survived", "timeout")]
    if survivors:
        lines += ["", "## Survivors: bugs the selected tests cannot see", ""]
        for r in survivors:
            lines += [f"### `{r.name}` ({r.category}, {r.status})", "", r.why, "",
                      f"`{r.file}`:", "", "```diff",
                      *(f"-{line}" for line in r.old.splitlines()),
                      *(f"+{line}" for line in r.new.splitlines()), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_report(campaign: Campaign, out: Path) -> None:
    write_json_atomic(out / "mutation-report.json", campaign.payload())
    write_text_atomic(out / "mutation-report.md", render_markdown(campaign))


# ---------------------------------------------------------------- the campaign

def _result(mutation: Mutation, status: str, **kw) -> Result:
    return Result(name=mutation.name, category=mutation.category, file=mutation.file,
                  status=status, why=mutation.why, old=mutation.old, new=mutation.new, **kw)


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1f} s"


def run_campaign(mutations: list[Mutation], *, repo: str | os.PathLike = REPO_ROOT,
                 command: list[str] | None = None, python: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, out: str | os.PathLike = DEFAULT_OUT,
                 include_gpu: bool = False, include_equivalent: bool = False,
                 include_untracked: bool = False, verify_import: str | None =
                 DEFAULT_VERIFY_IMPORT, mutations_file: str = "", workdir: str | None = None,
                 keep_copies: bool = False, log=print) -> Campaign:
    """Baseline, then every mutation in a fresh copy. Raises MutateError on a setup problem
    (the baseline included); otherwise returns the campaign, its report already written."""
    repo = Path(repo).resolve()
    out = Path(out)
    command = command or pytest_command(DEFAULT_PYTEST_ARGS)
    python = python or default_python(repo)
    campaign = Campaign(repo=str(repo), git_revision=git_revision(repo),
                        mutations_file=mutations_file, command=command, python=python,
                        timeout_s=timeout_s, include_gpu=include_gpu,
                        include_equivalent=include_equivalent, started_utc=_now(),
                        planned=len(mutations))
    files = tree_files(repo, include_untracked)
    temp = Path(tempfile.mkdtemp(prefix="det-mutate-", dir=workdir))
    try:
        snapshot = copy_tree(repo, temp / "snapshot", files)
        baseline_copy = Path(shutil.copytree(snapshot, temp / "baseline", symlinks=True))
        if verify_import:
            where = verify_import_resolves_to_copy(python, baseline_copy, verify_import)
            log(f"import {verify_import} inside the copy resolves to {where}")
        log(f"baseline (unmutated copy): {display_command(command, python)} ...", end=" ",
            flush=True)
        base = run_test_command(command, baseline_copy, python, timeout_s, temp / "baseline-run")
        campaign.baseline = {"status": base.outcome, "wall_s": round(base.wall_s, 1),
                             "returncode": base.returncode}
        write_text_atomic(out / "logs" / "baseline.log", base.log)
        if base.outcome != "passed":
            log(f"{base.outcome} ({_fmt_s(base.wall_s)})")
            detail = (f"first failure: {base.first_failure}" if base.first_failure
                      else f"exit code {base.returncode}")
            raise MutateError(
                f"the baseline (unmutated copy) did not pass the test command ({base.outcome}; "
                f"{detail}); fix the tree or choose another selection before mutating. "
                f"Log: {out / 'logs' / 'baseline.log'}\n--- last lines ---\n"
                + "\n".join(base.log.splitlines()[-30:]))
        log(f"passed ({_fmt_s(base.wall_s)})")
        if not keep_copies:
            shutil.rmtree(baseline_copy, ignore_errors=True)
        write_report(campaign, out)

        total = len(mutations)
        for index, mutation in enumerate(mutations, 1):
            log(f"[{index}/{total}] {mutation.name} ...", end=" ", flush=True)
            result = _run_one(mutation, index, snapshot, temp, command, python, timeout_s,
                              include_gpu, include_equivalent, keep_copies, out)
            campaign.results.append(result)
            log(_status_text(result) + (f" ({_fmt_s(result.wall_s)})"
                                        if result.wall_s is not None else ""))
            write_report(campaign, out)
        campaign.finished_utc = _now()
        write_report(campaign, out)
        return campaign
    finally:
        if keep_copies:
            log(f"copies kept in {temp}")
        else:
            shutil.rmtree(temp, ignore_errors=True)


def _run_one(mutation: Mutation, index: int, snapshot: Path, temp: Path, command: list[str],
             python: str, timeout_s: float, include_gpu: bool, include_equivalent: bool,
             keep_copies: bool, out: Path) -> Result:
    reason = check_mutation(mutation, snapshot)
    if reason:
        return _result(mutation, "not-applied", detail=reason)
    if mutation.needs_gpu and not include_gpu:
        return _result(mutation, "gpu-only", detail="GPU-only, not run on CPU; --include-gpu "
                                                    "runs it")
    if mutation.equivalent and not include_equivalent:
        return _result(mutation, "equivalent",
                       detail="equivalent mutant, not run; --include-equivalent runs it")
    start = time.monotonic()
    copy = Path(shutil.copytree(snapshot, temp / f"mutant-{index:03d}-{mutation.name}",
                                symlinks=True))
    try:
        apply_mutation(mutation, copy)
        run = run_test_command(command, copy, python, timeout_s, temp / f"run-{index:03d}")
    finally:
        if not keep_copies:
            shutil.rmtree(copy, ignore_errors=True)
    wall = round(time.monotonic() - start, 1)
    write_text_atomic(out / "logs" / f"{mutation.name}.log", run.log)
    if run.outcome == "timeout":
        return _result(mutation, "timeout", detail=f"no result within {timeout_s:g} s",
                       wall_s=wall)
    if run.outcome == "failed":
        detail = "" if run.first_failure else \
            f"exit code {run.returncode}, no failing test recorded (crash or collection error?)"
        return _result(mutation, "killed", killed_by=run.first_failure, detail=detail,
                       returncode=run.returncode, wall_s=wall)
    return _result(mutation, "survived", detail="the test command passed", returncode=0,
                   wall_s=wall)


def exit_code(campaign: Campaign, strict: bool = False) -> int:
    t = campaign.totals()
    if t["survived"] or (strict and (t["timeout"] or t["not-applied"])):
        return 1
    return 0


def default_python(repo: Path) -> str:
    venv = repo / ".venv" / "bin" / "python"
    # Not resolved: a venv's python is a symlink, and resolving it would leave the venv.
    return str(venv) if venv.exists() else sys.executable


# ---------------------------------------------------------------- command line

def _print_list(mutations: list[Mutation], repo: Path) -> int:
    stale = 0
    width = max(len(m.name) for m in mutations)
    for m in mutations:
        reason = check_mutation(m, repo)
        stale += reason is not None
        flags = "gpu-only" if m.needs_gpu else "equivalent" if m.equivalent else ""
        first, *rest = m.old.splitlines() or [""]
        more = f" (+{len(rest)} line{'s' if len(rest) > 1 else ''})" if rest else ""
        print(f"{m.name:<{width}}  {m.category:<9} {flags:<10} {m.file}")
        print(f"{'':<{width}}  - {first.strip()}{more}")
        print(f"{'':<{width}}  + {m.new.splitlines()[0].strip()}")
        if reason:
            print(f"{'':<{width}}  ! NOT APPLICABLE to the working tree: {reason}")
    print(f"\n{len(mutations)} mutations; categories: " + "; ".join(
        f"{c} = {d}" for c, d in CATEGORIES.items()))
    if stale:
        print(f"{stale} mutation(s) no longer match their source: {MUTATIONS_HINT}")
    return stale


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/mutate.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See docs/mutation-testing.md.")
    parser.add_argument("--list", action="store_true",
                        help="print the mutations (and whether each still applies), run nothing")
    parser.add_argument("--check", action="store_true",
                        help="like --list, but exit 1 when a mutation no longer applies")
    parser.add_argument("--only", metavar="NAME[,NAME]", help="run only these mutations")
    parser.add_argument("--category", metavar="CAT[,CAT]",
                        help=f"run only these categories ({', '.join(CATEGORIES)})")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--pytest-args", default=DEFAULT_PYTEST_ARGS,
                       help=f"arguments after `python -m pytest` (default: "
                            f"{DEFAULT_PYTEST_ARGS!r}); --junitxml is added")
    group.add_argument("--test-command", metavar="CMD",
                       help="a whole test command instead of pytest (shell-split; "
                            f"{PYTHON_PLACEHOLDER} and {JUNIT_PLACEHOLDER} are substituted); "
                            "non-zero exit = mutant killed")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help=f"per-mutant (and baseline) time limit, seconds (default "
                             f"{DEFAULT_TIMEOUT_S:g}); exceeding it is status 'timeout'")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"report folder (default {DEFAULT_OUT}/)")
    parser.add_argument("--include-gpu", action="store_true",
                        help="also run needs_gpu mutants (on a GPU machine)")
    parser.add_argument("--include-equivalent", action="store_true",
                        help="also run mutants documented as equivalent")
    parser.add_argument("--include-untracked", action="store_true",
                        help="copy untracked, non-ignored files too (new tests not yet added)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 on a timeout or a not-applied mutant too")
    parser.add_argument("--python", help="interpreter for the tests (default: the checkout's "
                                         ".venv/bin/python)")
    parser.add_argument("--mutations", type=Path, default=DEFAULT_MUTATIONS, metavar="FILE",
                        help="mutation list (default tools/mutations.toml)")
    parser.add_argument("--repo", type=Path, default=REPO_ROOT,
                        help="repository to copy and mutate (default: this checkout)")
    parser.add_argument("--verify-import", default=DEFAULT_VERIFY_IMPORT, metavar="PACKAGE",
                        help="package that must import from the copy (default det_suite; "
                             "'' skips the check)")
    parser.add_argument("--workdir", help="where the temporary copies go (default: $TMPDIR)")
    parser.add_argument("--keep-copies", action="store_true",
                        help="keep the mutant copies for inspection (they are printed)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        mutations = load_mutations(args.mutations)
        if args.list or args.check:
            stale = _print_list(select_mutations(mutations, args.only, args.category),
                                args.repo)
            return 1 if args.check and stale else 0
        selected = select_mutations(mutations, args.only, args.category)
        command = (shlex.split(args.test_command) if args.test_command
                   else pytest_command(args.pytest_args))
        campaign = run_campaign(
            selected, repo=args.repo, command=command, python=args.python,
            timeout_s=args.timeout, out=args.out, include_gpu=args.include_gpu,
            include_equivalent=args.include_equivalent,
            include_untracked=args.include_untracked,
            verify_import=args.verify_import or None, mutations_file=str(args.mutations),
            workdir=args.workdir, keep_copies=args.keep_copies)
    except MutateError as exc:
        print(f"\nmutate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nmutate: interrupted; the report holds the mutants finished so far",
              file=sys.stderr)
        return 130
    t = campaign.totals()
    score = campaign.score()
    print(f"\n{t['total']} mutants: " + ", ".join(f"{t[s]} {s}" for s in STATUSES if t[s])
          + (f"; mutation score {score:.0%}" if score is not None else ""))
    print(f"report: {args.out / 'mutation-report.md'} and {args.out / 'mutation-report.json'}")
    survivors = [r.name for r in campaign.results if r.status == "survived"]
    if survivors:
        print("SURVIVED (the tests cannot see these bugs): " + ", ".join(survivors))
    return exit_code(campaign, args.strict)


if __name__ == "__main__":
    sys.exit(main())
