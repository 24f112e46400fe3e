"""How the report reads comparison results (`det-suite gsm8k check`'s check.json,
`det-suite compare --json`) and shows what ran: exact passes, differs fails, not comparable
is its own status that no passing report may hold; titles a reader understands; the HTML
page's status badges and shortened kernel hashes."""

import json

import pytest

from det_suite.reports.repro import ReportSettings, build_report
from det_suite.reports.repro.html import HASH_CHARS, render_html
from det_suite.reports.repro.kinds import VERDICT_LINES, summarize
from det_suite.reports.repro.render import ran_counts, render_markdown, result_numbers


def _check(status, verdict=("all 128 rows exact",), reasons=()):
    return {"kind": "gsm8k-check", "status": status,
            "exit_code": {"exact": 0, "differs": 1}.get(status, 3),
            "fixture": "fixtures/gsm8k/m/f.json", "headline": verdict[0],
            "verdict": list(verdict), "reasons": list(reasons), "policy_changes": []}


def _compare(status, reasons=()):
    return {"kind": "fixed-work-compare", "status": status,
            "exit_code": {"exact": 0, "differs": 1}.get(status, 3), "a": "s2/run.json",
            "b": "s3/run.json", "headline": f"{status} headline", "reasons": list(reasons)}


@pytest.mark.parametrize("kind, data, status, title", [
    ("gsm8k-check", _check("exact"), "pass", "GSM8K fixture check"),
    ("gsm8k-check", _check("differs", ("2 of 128 rows NOT exact",)), "fail",
     "GSM8K fixture check"),
    ("gsm8k-check", _check("not comparable", ("NOT COMPARABLE",), ["stack differs"]),
     "not-comparable", "GSM8K fixture check"),
    ("fixed-work-compare", _compare("exact"), "pass", "Output comparison"),
    ("fixed-work-compare", _compare("differs"), "fail", "Output comparison"),
    ("fixed-work-compare", _compare("not comparable", ["different rows"]), "not-comparable",
     "Output comparison"),
], ids=["check-exact", "check-differs", "check-not-comparable", "compare-exact",
        "compare-differs", "compare-not-comparable"])
def test_a_comparison_status_is_its_own_verdict(kind, data, status, title):
    section = summarize(kind, data)
    assert (section["status"], section["title"]) == (status, title)


def test_not_comparable_names_why_among_what_did_not_run():
    section = summarize("gsm8k-check", _check("not comparable", ("NOT COMPARABLE",),
                                              ["the fixture is for sm120, this run sm90"]))
    assert section["skipped"] == ["not comparable: the fixture is for sm120, this run sm90"]


def test_a_long_verdict_is_cut_with_a_pointer_to_the_raw_data():
    verdict = ["3 of 128 rows NOT exact"] + [f"  row {i}: token 7 differs" for i in range(40)]
    lines = summarize("gsm8k-check", _check("differs", verdict))["headline"]
    assert len(lines) == VERDICT_LINES + 1
    assert lines[1] == "row 0: token 7 differs"               # indentation dropped
    assert lines[-1] == f"... {41 - VERDICT_LINES} more lines in the raw data"


def test_a_not_comparable_result_fails_the_report(tmp_path):
    path = tmp_path / "check.json"
    path.write_text(json.dumps(_check("not comparable", ("NOT COMPARABLE",), ["x"])))
    payload = build_report(ReportSettings(inputs=(str(path),), out=str(tmp_path / "r")))
    assert not payload["ok"] and payload["counts"] == {"not-comparable": 1}
    assert "NOT COMPARABLE" in render_markdown(payload)


@pytest.mark.parametrize("statuses, expected", [
    (["pass"], [("pass", "PASS")]),
    (["info", "info"], [("info", "no verdict x2")]),
    (["pass", "fail", "pass"], [("pass", "PASS x2"), ("fail", "FAIL")]),
], ids=["one-pass", "two-without-verdict", "mixed"])
def test_what_ran_counts_each_status(statuses, expected):
    assert ran_counts(statuses) == expected


@pytest.fixture
def two_results(tmp_path):
    digest_a, digest_b = "a" * 64, "b" * 64
    for name, digest, data in (("one", digest_a, _check("exact")),
                               ("two", digest_b, _compare("not comparable", ["x"]))):
        env = {"git_revision": "abc", "source_sha256": {"det_suite/kernels/k.py": digest}}
        (tmp_path / f"{name}.json").write_text(json.dumps({**data, "environment": env}))
    payload = build_report(ReportSettings(inputs=(str(tmp_path),), out=str(tmp_path / "r")))
    return payload, digest_a, digest_b


def test_html_shows_each_status_as_a_badge(two_results):
    html = render_html(two_results[0])
    assert '<span class="status pass">PASS</span>' in html
    assert '<span class="status not-comparable">NOT COMPARABLE</span>' in html
    assert "ran: <span" in html and "GSM8K fixture check" in html


def test_html_shortens_kernel_hashes_and_keeps_the_whole_digest(two_results):
    payload, digest_a, digest_b = two_results
    html = render_html(payload)
    for digest in (digest_a, digest_b):
        assert f'<code title="{digest}">{digest[:HASH_CHARS]}</code>' in html


@pytest.mark.parametrize("indices, every, text", [
    ([0, 1, 2], [0, 1, 2], "all"),
    ([0, 2], [0, 1, 2], "1, 3"),
    ([0], [0], "1"),
    ([3, 4], None, "4, 5"),
], ids=["every-result", "some-results", "the-only-result", "no-reference-set"])
def test_result_numbers_say_all_when_every_result_agrees(indices, every, text):
    assert result_numbers(indices, every) == text


def test_html_links_name_the_folder_of_files_that_share_a_name(tmp_path):
    for folder in ("recheck", "stages2"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "check.json").write_text(json.dumps(_check("exact")))
    html = render_html(build_report(ReportSettings(inputs=(str(tmp_path),),
                                                   out=str(tmp_path / "r"))))
    assert '<a href="../recheck/check.json">recheck/check.json</a>' in html
    assert '<a href="../stages2/check.json">stages2/check.json</a>' in html
