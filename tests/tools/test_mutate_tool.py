"""tools/mutate.py: the mutation list is valid, and the tool's mechanics work.

Nothing here runs the real test-suite against a mutant (that is the campaign itself, minutes
per mutant). The mechanics are checked on a tiny fake project in tmp_path whose "test
command" is a short Python script: a mutant that makes it fail is killed, one that leaves it
passing survives, one that hangs times out.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "mutate.py"


def _load_tool():
    spec = importlib.util.spec_from_file_location("det_suite_mutate_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


mutate = _load_tool()
MUTATIONS = mutate.load_mutations(mutate.DEFAULT_MUTATIONS)
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git executable")
QUIET = lambda *args, **kwargs: None  # noqa: E731 - the campaign's progress printer


# ---------------------------------------------------------------- the real mutation list

def test_mutation_list_is_valid():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names)), "mutation names must be unique"
    assert {m.category for m in MUTATIONS} == set(mutate.CATEGORIES), \
        "every category should have at least one mutation"
    for m in MUTATIONS:
        assert m.category in mutate.CATEGORIES
        assert m.old != m.new and m.why.strip()
        assert (REPO / m.file).suffix == ".py", m.file
        assert not (m.needs_gpu and m.equivalent)


def _at_head(path: str) -> str | None:
    if shutil.which("git") is None:
        return None
    out = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{path}"], capture_output=True)
    return out.stdout.decode("utf-8") if out.returncode == 0 else None


@pytest.mark.meta
@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_old_text_occurs_exactly_once_at_head(mutation, tmp_path):
    """At HEAD each `old` text must be unambiguous and the mutant valid Python. Files are
    edited concurrently; a snippet that a commit removed is not a failure of this test but
    is skipped with the tool's own "source changed" message (after checking that the tool
    reports it that way), so the list can be updated."""
    source = _at_head(mutation.file)
    if source is None:
        pytest.skip(f"{mutation.file} not readable at HEAD (no git checkout, or a new file)")
    count = mutate.count_occurrences(source, mutation.old)
    assert count <= 1, f"{mutation.name}: 'old' is ambiguous ({count} matches in {mutation.file})"
    copy = tmp_path / "head"
    (copy / mutation.file).parent.mkdir(parents=True)
    (copy / mutation.file).write_text(source, encoding="utf-8")
    if count == 0:
        reason = mutate.check_mutation(mutation, copy)
        assert reason and "source changed" in reason and "mutations.toml" in reason
        pytest.skip(f"{mutation.name}: {reason}")
    assert mutate.check_mutation(mutation, copy) is None
    mutated = mutate.mutated_source(mutation, source)
    assert mutated != source
    compile(mutated, mutation.file, "exec")  # a mutant that does not parse is killed for free


@pytest.mark.meta
@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_mutation_applies_to_the_working_tree(mutation):
    """A file moved or rewritten (the architecture split moved the policy's tile selection)
    must take its mutants along: a mutant that no longer applies tests nothing."""
    assert mutate.check_mutation(mutation, REPO) is None, (
        f"{mutation.name} no longer applies to {mutation.file}: update tools/mutations.toml")


def test_gpu_only_and_equivalent_mutants_are_marked():
    flagged = {m.name: (m.needs_gpu, bool(m.equivalent)) for m in MUTATIONS}
    assert flagged["pdl-no-gdc-wait"] == (True, False)
    assert flagged["fp-fusion-enabled"] == (True, False)
    assert flagged["split-k-fixup-reverse"] == (False, False)


# ---------------------------------------------------------------- list parsing and selection

def _write_list(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def test_invalid_lists_are_rejected_with_every_problem(tmp_path):
    bad = _write_list(tmp_path / "bad.toml", """
        [[mutation]]
        name = "dup"
        category = "schedule"
        file = "a.py"
        old = "x"
        new = "y"
        why = "w"

        [[mutation]]
        name = "dup"
        category = "nonsense"
        file = "/etc/passwd"
        old = "same"
        new = "same"
        why = "w"

        [[mutation]]
        name = "missing-why"
        category = "masking"
        file = "a.py"
        old = "x"
        new = "y"
        colour = "blue"
        """)
    with pytest.raises(mutate.MutateError) as info:
        mutate.load_mutations(bad)
    message = str(info.value)
    for fragment in ("duplicate name 'dup'", "unknown category 'nonsense'",
                     "relative path", "identical", "'why' must be", "unknown field(s) colour"):
        assert fragment in message


def test_selection_by_name_and_category():
    picked = mutate.select_mutations(MUTATIONS, only="split-k-fixup-reverse,scale-a-only")
    assert [m.name for m in picked] == ["split-k-fixup-reverse", "scale-a-only"]
    assert all(m.category == "masking"
               for m in mutate.select_mutations(MUTATIONS, category="masking"))
    with pytest.raises(mutate.MutateError, match="unknown mutation"):
        mutate.select_mutations(MUTATIONS, only="no-such-mutant")
    with pytest.raises(mutate.MutateError, match="unknown category"):
        mutate.select_mutations(MUTATIONS, category="vibes")
    with pytest.raises(mutate.MutateError, match="matches no mutation"):
        mutate.select_mutations(MUTATIONS, only="scale-a-only", category="schedule")


def test_check_reports_missing_and_ambiguous_text(tmp_path):
    (tmp_path / "m.py").write_text("a = 1\na = 1\nb = 2\n")
    make = lambda old: mutate.Mutation("n", "schedule", "m.py", old, "z", "w")  # noqa: E731
    assert mutate.check_mutation(make("b = 2"), tmp_path) is None
    assert "occurs 2 times" in mutate.check_mutation(make("a = 1"), tmp_path)
    assert "occurs 0 times" in mutate.check_mutation(make("c = 3"), tmp_path)
    assert "does not exist" in mutate.check_mutation(
        mutate.Mutation("n", "schedule", "gone.py", "x", "y", "w"), tmp_path)
    assert mutate.count_occurrences("aaa", "aa") == 2  # overlapping matches are ambiguous too


# ---------------------------------------------------------------- a fake project

CHECK_SCRIPT = '''\
"""The fake project's test command: argv[1] is where to write junit XML."""
import sys, time
import fakepkg

failed = fakepkg.VALUE != 1
if getattr(fakepkg, "HANG", False):
    time.sleep(60)
case = ('<testcase classname="tests.test_fake" name="test_value">'
        + ('<failure message="VALUE is not 1"/>' if failed else '') + '</testcase>')
with open(sys.argv[1], "w") as handle:
    handle.write('<?xml version="1.0"?><testsuites><testsuite name="fake">'
                 '<testcase classname="tests.test_fake" name="test_import"/>'
                 + case + '</testsuite></testsuites>')
sys.exit(1 if failed else 0)
'''
FAKE_COMMAND = [sys.executable, "check.py", "{junit}"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "-c", "commit.gpgsign=false", *args], check=True, capture_output=True)


def _fake_project(tmp_path: Path, value: int = 1) -> Path:
    repo = tmp_path / "fake"
    (repo / "fakepkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "fakepkg" / "__init__.py").write_text(f"VALUE = {value}  # the answer\n")
    (repo / "fakepkg" / "other.py").write_text("UNRELATED = True\n")
    (repo / "tests" / "test_fake.py").write_text("def test_value():\n    pass\n")
    (repo / "check.py").write_text(CHECK_SCRIPT)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "fake project")
    return repo


def _m(name: str, old: str, new: str, **kw) -> object:
    return mutate.Mutation(name=name, category=kw.pop("category", "schedule"),
                           file=kw.pop("file", "fakepkg/__init__.py"), old=old, new=new,
                           why=f"why {name}", **kw)


KILLER = _m("value-two", "VALUE = 1", "VALUE = 2")
SURVIVOR = _m("comment-only", "# the answer", "# another comment")
STALE = _m("stale", "VALUE = 3", "VALUE = 4")
GPU = _m("gpu-thing", "VALUE = 1", "VALUE = 5", needs_gpu=True)
EQUIVALENT = _m("same-thing", "VALUE = 1", "VALUE = 1 + 0", equivalent="1 + 0 == 1")
HANG = _m("hang", "VALUE = 1", "VALUE = 1\nHANG = True")


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


@needs_git
def test_copy_holds_uncommitted_edits_of_tracked_files_only(tmp_path, monkeypatch):
    monkeypatch.delenv("DET_SUITE_REVISION", raising=False)  # git's view, not a sender's
    repo = _fake_project(tmp_path)
    (repo / "fakepkg" / "other.py").write_text("UNRELATED = False  # edited, not committed\n")
    (repo / "untracked.py").write_text("NEW = 1\n")
    copy = mutate.copy_tree(repo, tmp_path / "copy", mutate.tree_files(repo))
    assert (copy / "fakepkg" / "other.py").read_text().startswith("UNRELATED = False")
    assert not (copy / "untracked.py").exists()
    assert not (copy / ".git").exists()
    with_new = mutate.copy_tree(repo, tmp_path / "copy2",
                                mutate.tree_files(repo, include_untracked=True))
    assert (with_new / "untracked.py").exists()
    assert "+diff." in mutate.git_revision(repo)


@needs_git
def test_applying_a_mutation_changes_only_its_file(tmp_path):
    repo = _fake_project(tmp_path)
    copy = mutate.copy_tree(repo, tmp_path / "copy", mutate.tree_files(repo))
    before = _tree(copy)
    mutate.apply_mutation(KILLER, copy)
    after = _tree(copy)
    changed = [path for path in before if before[path] != after[path]]
    assert changed == ["fakepkg/__init__.py"]
    assert after["fakepkg/__init__.py"] == b"VALUE = 2  # the answer\n"
    assert set(after) == set(before)
    assert _tree(repo)["fakepkg/__init__.py"] == b"VALUE = 1  # the answer\n"  # original intact
    with pytest.raises(mutate.NotApplied, match="source changed"):
        mutate.apply_mutation(STALE, copy)
    assert _tree(copy) == after


@needs_git
def test_campaign_statuses_report_and_exit_code(tmp_path):
    repo = _fake_project(tmp_path)
    out = tmp_path / "report"
    campaign = mutate.run_campaign(
        [KILLER, SURVIVOR, STALE, GPU, EQUIVALENT, HANG], repo=repo, command=FAKE_COMMAND,
        python=sys.executable, timeout_s=5, out=out, verify_import="fakepkg", log=QUIET)
    status = {r.name: r.status for r in campaign.results}
    assert status == {"value-two": "killed", "comment-only": "survived", "stale": "not-applied",
                      "gpu-thing": "gpu-only", "same-thing": "equivalent", "hang": "timeout"}
    by_name = {r.name: r for r in campaign.results}
    assert by_name["value-two"].killed_by == "tests/test_fake.py::test_value"
    assert "source changed" in by_name["stale"].detail
    assert "GPU-only, not run on CPU" in by_name["gpu-thing"].detail
    assert mutate.exit_code(campaign) == 1
    assert mutate.exit_code(campaign, strict=True) == 1

    report = json.loads((out / "mutation-report.json").read_text())
    assert report["complete"] and report["baseline"]["status"] == "passed"
    assert report["totals"] == {"killed": 1, "survived": 1, "timeout": 1, "not-applied": 1,
                                "gpu-only": 1, "equivalent": 1, "total": 6}
    assert report["git_revision"] and len(report["git_revision"]) >= 3
    assert report["mutation_score"] == pytest.approx(1 / 3)
    first = report["results"][0]
    assert {"name", "category", "file", "status", "killed_by", "wall_s"} <= set(first)
    markdown = (out / "mutation-report.md").read_text()
    assert "killed by tests/test_fake.py::test_value" in markdown
    assert "## Survivors" in markdown and "comment-only" in markdown
    assert (out / "logs" / "value-two.log").exists()
    # The checkout itself is never touched.
    assert (repo / "fakepkg" / "__init__.py").read_text() == "VALUE = 1  # the answer\n"


@needs_git
def test_no_survivor_exits_zero_and_strict_counts_not_applied(tmp_path):
    repo = _fake_project(tmp_path)
    campaign = mutate.run_campaign([KILLER, STALE], repo=repo, command=FAKE_COMMAND,
                                   python=sys.executable, timeout_s=30, out=tmp_path / "r",
                                   verify_import="fakepkg", log=QUIET)
    assert mutate.exit_code(campaign) == 0
    assert mutate.exit_code(campaign, strict=True) == 1


@needs_git
def test_failing_baseline_stops_the_campaign(tmp_path):
    repo = _fake_project(tmp_path, value=7)
    with pytest.raises(mutate.MutateError, match="baseline"):
        mutate.run_campaign([KILLER], repo=repo, command=FAKE_COMMAND, python=sys.executable,
                            timeout_s=30, out=tmp_path / "r", verify_import="fakepkg",
                            log=QUIET)


@needs_git
def test_import_must_resolve_to_the_copy(tmp_path):
    repo = _fake_project(tmp_path)
    copy = mutate.copy_tree(repo, tmp_path / "copy", mutate.tree_files(repo))
    where = mutate.verify_import_resolves_to_copy(sys.executable, copy, "fakepkg")
    assert where.is_relative_to(copy.resolve())
    with pytest.raises(mutate.MutateError, match="not to the copy"):
        mutate.verify_import_resolves_to_copy(sys.executable, copy, "json")


@needs_git
def test_cli_exit_codes(tmp_path, capsys):
    repo = _fake_project(tmp_path)
    listing = _write_list(tmp_path / "list.toml", """
        [[mutation]]
        name = "value-two"
        category = "rounding"
        file = "fakepkg/__init__.py"
        old = "VALUE = 1"
        new = "VALUE = 2"
        why = "breaks the value"

        [[mutation]]
        name = "comment-only"
        category = "rounding"
        file = "fakepkg/__init__.py"
        old = "# the answer"
        new = "# a comment"
        why = "changes nothing"
        """)
    common = ["--repo", str(repo), "--mutations", str(listing), "--verify-import", "fakepkg",
              "--python", sys.executable, "--test-command",
              f"{sys.executable} check.py {{junit}}", "--timeout", "30"]
    assert mutate.main([*common, "--out", str(tmp_path / "a")]) == 1
    printed = capsys.readouterr().out
    assert "[1/2] value-two ... killed by tests/test_fake.py::test_value" in printed
    assert "[2/2] comment-only ... survived" in printed
    assert mutate.main([*common, "--only", "value-two", "--out", str(tmp_path / "b")]) == 0
    assert mutate.main(["--repo", str(repo), "--mutations", str(listing), "--check"]) == 0
    (repo / "fakepkg" / "__init__.py").write_text("VALUE = 1\n")  # the comment is gone
    assert mutate.main(["--repo", str(repo), "--mutations", str(listing), "--check"]) == 1
    assert "NOT APPLICABLE" in capsys.readouterr().out
    assert mutate.main([*common, "--only", "nope"]) == 2


# ---------------------------------------------------------------- report writing, junit

def _campaign(**kw) -> object:
    campaign = mutate.Campaign(repo="r", git_revision="abc", mutations_file="m", command=["c"],
                               python="p", timeout_s=1, include_gpu=False,
                               include_equivalent=False, started_utc="t", planned=1, **kw)
    return campaign


def test_report_is_written_atomically(tmp_path, monkeypatch):
    out = tmp_path / "report"
    first = _campaign()
    first.results.append(mutate.Result("a", "schedule", "f.py", "killed", killed_by="t::x"))
    mutate.write_report(first, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    second = _campaign()
    second.results.append(mutate.Result("a", "schedule", "f.py", "survived"))

    def failing_replace(src, dst):
        raise OSError("disk full at the worst moment")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        mutate.write_report(second, out)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before, "a failed write must leave the previous report, and no temp file"
    assert json.loads(after["mutation-report.json"])["results"][0]["status"] == "killed"


def test_first_failing_test_from_junit_and_output(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_x.py").write_text("")
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_x" name="test_ok"/>'
        '<testcase classname="tests.unit.test_x.TestY" name="test_z[a-b]">'
        '<failure message="boom"/></testcase>'
        '<testcase classname="tests.unit.test_x" name="test_later"><error/></testcase>'
        '</testsuite></testsuites>')
    assert mutate.first_failure_from_junit(junit, tmp_path) == \
        "tests/unit/test_x.py::TestY::test_z[a-b]"
    junit.write_text('<testsuites><testsuite><testcase classname="" name="tests.unit.test_x">'
                     '<error message="collection failure"/></testcase></testsuite></testsuites>')
    assert mutate.first_failure_from_junit(junit, tmp_path) == \
        "tests/unit/test_x.py (collection error)"
    assert mutate.first_failure_from_junit(tmp_path / "missing.xml", tmp_path) is None
    output = "....F\n=== short test summary info ===\nFAILED tests/unit/test_x.py::test_y - x\n"
    assert mutate.first_failure_from_output(output) == "tests/unit/test_x.py::test_y"


def test_default_command_is_fail_fast_pytest_with_junit():
    command = mutate.pytest_command(mutate.DEFAULT_PYTEST_ARGS)
    assert command[:3] == ["{python}", "-m", "pytest"]
    assert "-x" in command and "no:cacheprovider" in command
    assert command[-1] == "--junitxml={junit}"
    assert mutate.DEFAULT_TIMEOUT_S == 900


def test_meta_tests_are_deselected_so_a_kill_is_a_behavioural_tests():
    """A meta-test fails on any edit to its text (the README block, the mutant list), so it
    could "kill" every mutant: the command deselects it, keeping a selection the user gave."""
    default = mutate.pytest_command("-x -q tests/unit")[3:]   # after `{python} -m pytest`
    assert default[default.index("-m") + 1] == "not meta"
    given = mutate.pytest_command("-x -m 'not slow' tests/unit")[3:]
    assert given.count("-m") == 1 and given[given.index("-m") + 1] == "(not slow) and not meta"


def test_the_meta_tests_carry_the_marker():
    import ast

    marked = set()
    for path in (REPO / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d) == "pytest.mark.meta" for d in node.decorator_list):
                marked.add(node.name)
    assert {"test_readme_measured_block_is_honest_about_this_tree",
            "test_every_mutation_applies_to_the_working_tree",
            "test_old_text_occurs_exactly_once_at_head"} <= marked
