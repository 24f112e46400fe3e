"""The README's Measured block says what the committed GPU evidence says, and says honestly
whether the code has moved since: never that the evidence is fresh.

Code lands without a GPU run; the block then names the files that changed since the run
(`python -m det_suite.reports.evidence_summary` rewrites it). Tests that read the committed
evidence skip on a checkout without docs/ (the suite must pass there).
"""

import json
import shutil

import pytest

from det_suite.reports import evidence, evidence_summary
from det_suite.reports.provenance import REPO_ROOT, source_hashes

EVIDENCE = REPO_ROOT / evidence_summary.EVIDENCE_ROOT
needs_docs = pytest.mark.skipif(not EVIDENCE.is_dir(),
                                reason="docs/evidence is absent from this checkout")


@pytest.fixture(scope="module")
def summaries():
    found = evidence_summary.families()
    assert found, "docs/evidence holds no <family>/summary.json"
    return found


@pytest.fixture(scope="module")
def raw_run(tmp_path_factory, summaries):
    family = next(iter(summaries))
    return evidence_summary.unpack_raw(EVIDENCE / family, tmp_path_factory.mktemp("raw"))


@pytest.mark.meta
@needs_docs
def test_readme_measured_block_is_honest_about_this_tree():
    block = evidence.readme_block((REPO_ROOT / "README.md").read_text())
    assert block is not None, "README.md has no generated evidence block"
    assert block == evidence_summary.expected_block(), \
        "README's Measured block is not what the evidence and this tree say: run " \
        "python -m det_suite.reports.evidence_summary"


@needs_docs
def test_each_summary_is_what_its_raw_results_say(summaries, raw_run):
    family, summary = next(iter(summaries.items()))
    again = evidence_summary.summarize(raw_run, family, summary["source_run"])
    assert again == summary


@needs_docs
def test_the_claims_are_the_ones_the_suite_exists_for(summaries):
    for summary in summaries.values():
        headline = summary["headline"]
        assert headline["det_suite_differing"] == 0 and headline["det_suite_comparisons"] > 0
        assert headline["control"]["differing"] > 0 and headline["control"]["ok"]
        failures = headline["pytest_failures"]
        assert headline["pytest"]["errors"] == 0
        assert failures["undeclared"] == [] and failures["declared_but_passed"] == []
        assert headline["pytest"]["failures"] == len(failures["declared"])
        assert (headline["gpu_mutants"] or {}).get("survived", 0) == 0  # None: not run
        assert headline["lint"]["violations"] == 0
        assert headline["bench_gate_failures"] == []


@needs_docs
def test_evidence_stays_small():
    total = sum(p.stat().st_size for p in EVIDENCE.rglob("*") if p.is_file())
    assert total <= 3 * 1024 * 1024, f"docs/evidence holds {total} bytes, more than 3 MB"


def _summary(deps):
    return {"schema": 1, "dependencies": deps}


def test_an_edited_dependency_is_named_and_a_moved_one_is_not():
    summary = _summary({"det_suite/kernels/a.py": "h1", "tests/unit/test_a.py": "h2",
                        "det_suite/ops/b.py": "h3", "tests/unit/test_c.py": "h4"})
    current = {"det_suite/kernels/a.py": "h1-edited", "tests/unit/ops/test_a.py": "h2",
               "det_suite/policy/new.py": "h9", "tests/unit/checks/test_c.py": "h4-edited"}
    assert evidence_summary.changed_since(summary, current) == {
        "det_suite/kernels/a.py": "changed since", "det_suite/ops/b.py": "deleted since",
        "det_suite/policy/new.py": "added since",
        "tests/unit/test_c.py": "moved to `tests/unit/checks/test_c.py` and changed"}


@needs_docs
def test_the_block_names_what_changed_and_says_when_nothing_did(summaries):
    summary = next(iter(summaries.values()))
    clean = evidence_summary.render_family(summary, {}, "docs/evidence/x")
    stale = evidence_summary.render_family(
        summary, {"det_suite/kernels/fp8_epilogue.py": "changed since"}, "docs/evidence/x")
    assert "byte-identical" in clean and "Changed since" not in clean
    assert "Changed since the run: 1 files" in stale and "fp8_epilogue.py" in stale


@needs_docs
def test_editing_a_kernel_in_a_copy_makes_the_block_say_so(tmp_path, summaries):
    summary = next(iter(summaries.values()))
    before = evidence_summary.changed_since(summary, source_hashes(REPO_ROOT))
    # A kernel the run measured that this tree has not changed yet (kernel work lands
    # between GPU runs, so which ones are still as measured varies).
    unchanged = sorted(p for p in summary["dependencies"]
                       if p.startswith("det_suite/kernels/") and p not in before)
    if not unchanged:
        pytest.skip("every kernel the evidence run measured has changed since: nothing to edit")
    for sub in ("det_suite", "tests"):
        shutil.copytree(REPO_ROOT / sub, tmp_path / sub,
                        ignore=shutil.ignore_patterns("__pycache__"))
    kernel = tmp_path / unchanged[0]
    kernel.write_text(kernel.read_text() + "\n# edited\n")
    after = evidence_summary.changed_since(summary, source_hashes(tmp_path))
    assert after.get(unchanged[0]) == "changed since"


JUNIT = """<testsuites><testsuite name="pytest">
<testcase classname="tests.model.test_e2e" name="test_passes" time="1.0" />
<testcase classname="tests.model.test_e2e" name="test_fails" time="1.0"><failure message="x">E</failure></testcase>
<testcase classname="tests.unit.test_k.TestGroup" name="test_errs[a]" time="1.0"><error message="y">E</error></testcase>
</testsuite></testsuites>"""


@pytest.mark.parametrize("declared, expected", [
    ([], {"declared": [], "undeclared": ["tests/model/test_e2e.py::test_fails",
                                          "tests/unit/test_k.py::TestGroup::test_errs[a]"],
          "declared_but_passed": []}),
    (["tests/model/test_e2e.py::test_fails", "tests/model/test_e2e.py::test_passes"],
     {"declared": ["tests/model/test_e2e.py::test_fails"],
      "undeclared": ["tests/unit/test_k.py::TestGroup::test_errs[a]"],
      "declared_but_passed": ["tests/model/test_e2e.py::test_passes"]}),
], ids=["nothing-declared", "one-declared-one-stale"])
def test_gpu_failures_are_matched_against_their_declarations(tmp_path, declared, expected):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "junit.xml").write_text(JUNIT)
    (tmp_path / evidence.KNOWN_FAILURES).write_text(json.dumps(
        {"failures": [{"nodeid": n, "why": "because"} for n in declared]}))
    found = evidence.failure_declarations(tmp_path)
    found["declared"] = [d["nodeid"] for d in found["declared"]]
    assert found == expected


SKIPS = """<testsuites><testsuite name="pytest">
<testcase classname="tests.unit.test_a" name="test_x[sm120]" time="0"><skipped type="pytest.skip" message="sm120: needs an SM12x GPU (compute capability 12.x); found NVIDIA H200 (9.0)">s</skipped></testcase>
<testcase classname="tests.unit.test_a" name="test_y[sm120]" time="0"><skipped type="pytest.skip" message="sm120: needs an SM12x GPU">s</skipped></testcase>
<testcase classname="tests.unit.test_a" name="test_z" time="0"><skipped type="pytest.skip" message="perf: runs only with --run-perf">s</skipped></testcase>
<testcase classname="" name="tests.unit.test_g" time="0"><skipped message="collection skipped">('/r/tests/unit/test_g.py', 10, "Skipped: needs datasets (pip install 'det-suite[gsm8k]')")</skipped></testcase>
<testcase classname="tests.unit.test_b" name="test_ran" time="0" />
</testsuite></testsuites>"""


def test_not_run_tests_are_counted_by_reason(tmp_path):
    (tmp_path / "junit.xml").write_text(SKIPS)
    assert evidence.junit_skip_reasons(tmp_path / "junit.xml") == {
        "sm120": 2, "needs datasets": 1, "perf": 1}


@needs_docs
def test_the_readme_block_says_why_tests_were_not_run(summaries):
    headline = next(iter(summaries.values()))["headline"]
    block = evidence.render_markdown(headline, "docs/evidence/x", "tools/gpu_evidence.sh")
    reasons = headline["not_run_reasons"]
    assert sum(reasons.values()) == headline["pytest"]["skipped"]
    assert all(f"{reason} {count}" in block for reason, count in reasons.items())
