"""The README says what the committed GPU evidence says, and that evidence describes HEAD.

When a kernel, the policy, the harness or a GPU test changes, the evidence no longer
describes the code and `test_evidence_still_describes_the_code` fails, naming the files:
re-run `tools/h200_evidence.sh` (its three phases) and regenerate the README block with
`python -m det_suite.reports.evidence` before landing.
"""

import json
import shutil

import pytest

from det_suite.reports import evidence
from det_suite.reports.provenance import REPO_ROOT

FOLDER = REPO_ROOT / evidence.CURRENT_EVIDENCE


@pytest.fixture(scope="module")
def headline():
    return evidence.headline(FOLDER)


def test_readme_measured_block_is_generated_from_the_evidence(headline):
    block = evidence.readme_block((REPO_ROOT / "README.md").read_text())
    assert block is not None, "README.md has no generated evidence block"
    assert block == evidence.render_markdown(headline, evidence.CURRENT_EVIDENCE), \
        "README's Measured block differs from the evidence: run python -m det_suite.reports.evidence"


def test_evidence_still_describes_the_code():
    changed = evidence.stale(FOLDER)
    assert changed == {}, ("evidence is stale, re-run tools/h200_evidence.sh: "
                           + ", ".join(f"{p} ({why})" for p, why in changed.items()))


def test_every_phase_records_its_revision_machine_and_source_hashes():
    for phase in ("matrix", "tests"):
        env = evidence._load_json(FOLDER / phase / "gpu_suite.json")["environment"]
        assert env["revision"]["commit"] and env["revision"]["source"] == "sender"
        assert env["gpu"]["name"] and env["source_sha256"] and env["source_tree_sha256"]


def test_the_claims_are_the_ones_the_suite_exists_for(headline):
    assert headline["det_suite_differing"] == 0 and headline["det_suite_comparisons"] > 0
    assert headline["control"]["differing"] > 0 and headline["control"]["ok"]
    failures = headline["pytest_failures"]
    assert headline["pytest"]["errors"] == 0
    assert failures["undeclared"] == [] and failures["declared_but_passed"] == []
    assert headline["pytest"]["failures"] == len(failures["declared"])
    assert headline["gpu_mutants"]["survived"] == 0 and headline["lint"]["violations"] == 0
    assert headline["bench_gate_failures"] == []


def test_a_changed_dependency_makes_the_evidence_stale(tmp_path):
    """Counterpart of the staleness test: one edited kernel in a copy of the tree is named."""
    for sub in ("det_suite", "tests"):
        shutil.copytree(REPO_ROOT / sub, tmp_path / sub,
                        ignore=shutil.ignore_patterns("__pycache__"))
    kernel = tmp_path / "det_suite" / "kernels" / "fp8_epilogue.py"
    kernel.write_text(kernel.read_text() + "\n# edited\n")
    assert evidence.stale(FOLDER, root=tmp_path) == {
        "det_suite/kernels/fp8_epilogue.py": "changed since"}


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


def test_the_readme_block_says_why_tests_were_not_run(headline):
    block = evidence.render_markdown(headline, evidence.CURRENT_EVIDENCE)
    reasons = headline["not_run_reasons"]
    assert sum(reasons.values()) == headline["pytest"]["skipped"]
    assert all(f"{reason} {count}" in block for reason, count in reasons.items())
