"""`det-suite report`: results of several checks in, one report out (JSON, Markdown for a
pull request and for $GITHUB_STEP_SUMMARY, HTML with the plots embedded): what ran, what
was skipped and why, each machine's environment, revisions and kernel-source hashes, links
to the raw data."""

import gzip
import json

import pytest

from det_suite.bench.e2e import bench_e2e
from det_suite.checks.cache_hit import CacheHitResult, Comparison
from det_suite.checks.cache_hit_report import write_report as write_cache_hit
from det_suite.reports import evidence_summary
from det_suite.reports.provenance import REPO_ROOT, source_hashes
from det_suite.reports.repro import (ReportInputError, ReportSettings, build_report,
                                     load_inputs, make_report)
from det_suite.reports.repro.render import render_markdown, render_step_summary
from tests.unit.bench.test_e2e_job import FakeRunner, _settings as e2e_settings

KERNEL = "det_suite/kernels/fp8_scaled_mm.py"
TABLE = "det_suite/policy/tables/sm90.json"


CURRENT = source_hashes()


def _env(host="gpu-box", kernel_hash=None, **extra):
    """A GPU machine's environment; its kernel hashes are this tree's unless told."""
    return {"host": host, "machine": "NVIDIA H200", "torch": "2.11.0+cu130",
            "triton": "3.6.0", "torch_cuda": "13.0", "python": "3.12.3", "det_suite": "0.1.0",
            "git_revision": "abc123", "timestamp_utc": "2026-12-03T08:00:00+00:00",
            "gpu": {"name": "NVIDIA H200", "capability": "9.0"},
            "source_sha256": {KERNEL: kernel_hash or CURRENT[KERNEL], TABLE: CURRENT[TABLE],
                              "det_suite/cli.py": "c" * 64},
            **extra}


def _write(path, payload, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(payload).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def results(tmp_path):
    """A results folder as a GPU run leaves it: lint (gzipped), a cache-hit run written by
    the check's own writer, a GSM8K run, an e2e run with its boots and plot."""
    root = tmp_path / "results"
    _write(root / "lint.json.gz", {"lint": {"schema": "det-suite/policy-lint/2", "ok": True,
                                            "compiled": 5, "triton_version": "3.6.0",
                                            "violations": [], "warnings": [], "tables": []},
                                   "environment": _env()}, gz=True)
    exact = Comparison(mode="det", engine="eager", prefix=12, batch=1, rep=0, phase="hit",
                       cached_tokens=8, values=7, max_abs_delta=0.0, tokens_equal=True,
                       exact=True, hit_proven=True)
    cache_hit = CacheHitResult(settings={"model": "synthetic:tiny?seed=0", "backend":
                                         "embedded", "modes": ["det"], "prefixes": [12],
                                         "batches": [1]},
                               comparisons=[exact], seconds=1.0,
                               skipped=["det/graph: CUDA Graphs need a CUDA device"])
    write_cache_hit(cache_hit, root / "cache_hit", _env())
    _write(root / "gsm8k" / "gsm8k.json", {
        "kind": "gsm8k", "schema": "det-suite/gsm8k-fixture/1", "environment": _env(),
        "summary": {"rows": 4, "correct": 3, "accuracy": 0.75, "answers": {}, "stopped": 4,
                    "output_tokens": 90}, "key": {"model": "synthetic:tiny"}})
    bench_e2e(e2e_settings(root / "e2e"), boot_runner=FakeRunner())
    return root


def test_a_folder_yields_every_result_and_skips_boot_records(results):
    found, notes = load_inputs([results])
    assert sorted(r.kind for r in found) == ["cache-hit", "e2e", "gsm8k", "lint"]
    assert notes == []
    e2e = next(r for r in found if r.kind == "e2e")
    assert [p.name for p in e2e.plots] == ["e2e_samples.png"]


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.json", "does not exist"),
    (lambda d: _write(d / "x.json", {"rows": []}), "not a det-suite result"),
    (lambda d: (d / "bad.json").write_text("{") and d / "bad.json", "not readable JSON"),
    (lambda d: d, "no det-suite result found"),
], ids=["missing", "not-a-result", "bad-json", "empty-folder"])
def test_bad_inputs_are_refused_by_name(tmp_path, make, message):
    with pytest.raises(ReportInputError, match=message):
        load_inputs([make(tmp_path)])


def test_what_ran_and_what_did_not(results, tmp_path):
    payload = build_report(ReportSettings(inputs=(str(results),), out=str(tmp_path / "r")))
    present = {c["kind"]: c["present"] for c in payload["checks"]}
    assert present == {"invariance": False, "lint": True, "gemm-bench": False,
                       "cache-hit": True, "gsm8k": True, "e2e": True, "gpu-suite": False}
    assert [r["kind"] for r in payload["results"]] == ["lint", "cache-hit", "gsm8k", "e2e"]
    assert payload["ok"] and payload["counts"] == {"info": 1, "pass": 3}
    markdown = render_markdown(payload)
    assert "| Kernel invariance | not in this report (no result given) |" in markdown
    assert "- Prefix-cache hit: det/graph: CUDA Graphs need a CUDA device" in markdown


def test_links_to_the_raw_data_are_relative_to_the_report(results, tmp_path):
    payload = build_report(ReportSettings(inputs=(str(results),), out=str(tmp_path / "r")))
    links = {r["kind"]: r["link"] for r in payload["results"]}
    assert links["e2e"] == "../results/e2e/e2e.json"
    assert links["lint"] == "../results/lint.json.gz"
    assert "[e2e.json](../results/e2e/e2e.json)" in render_markdown(payload)


def test_environment_per_machine_with_what_each_recorded(results, tmp_path):
    payload = build_report(ReportSettings(inputs=(str(results),), out=str(tmp_path / "r")))
    gpu_box = next(m for m in payload["machines"] if m["host"] == "gpu-box")
    fields = gpu_box["fields"]
    assert (fields["GPU"], fields["capability"], fields["torch"]) == ("NVIDIA H200", "9.0",
                                                                     "2.11.0+cu130")
    assert fields["driver"] is None          # not recorded: shown as such, never guessed
    assert "| driver | not recorded |" in render_markdown(payload)


def test_driver_and_packages_come_from_results_that_recorded_them(tmp_path):
    path = _write(tmp_path / "custom.json", {
        "kind": "custom", "ok": True, "environment": _env(),
        "gpu": {"driver": "580.65", "power_limit_w": 700.0, "cuda_driver": "13.0"},
        "packages": {"transformers": "4.57.0", "sglang": None, "flashinfer": "0.7.2"}})
    payload = build_report(ReportSettings(inputs=(str(path),), out=str(tmp_path / "r")))
    fields = payload["machines"][0]["fields"]
    assert (fields["driver"], fields["power limit"], fields["transformers"],
            fields["flashinfer"], fields["sglang"]) == ("580.65", "700 W", "4.57.0", "0.7.2",
                                                        None)


@pytest.mark.parametrize("second_hash, consistent", [(None, True), ("d" * 64, False)],
                         ids=["same-kernel", "different-kernel"])
def test_kernel_hashes_across_results(tmp_path, second_hash, consistent):
    one = _write(tmp_path / "in" / "one.json", {"kind": "x", "ok": True, "environment": _env()})
    two = _write(tmp_path / "in" / "two.json", {"kind": "y", "ok": True,
                                                "environment": _env(kernel_hash=second_hash)})
    payload = build_report(ReportSettings(inputs=(str(one), str(two)), out=str(tmp_path)))
    hashes = payload["kernel_hashes"]
    assert hashes["consistent"] is consistent
    assert hashes["differ"] == ([] if consistent else [KERNEL])
    row = next(r for r in hashes["rows"] if r["path"] == KERNEL)
    assert row["unchanged"] is consistent       # one hash, and it is this tree's file
    assert (render_step_summary(payload).count("Kernel sources differ across results")
            == (0 if consistent else 1))


def test_a_kernel_changed_since_the_run_is_named(tmp_path):
    path = _write(tmp_path / "x.json", {"kind": "x", "ok": True,
                                        "environment": _env(kernel_hash="e" * 64)})
    payload = build_report(ReportSettings(inputs=(str(path),), out=str(tmp_path)))
    assert payload["kernel_hashes"]["changed_since"] == [KERNEL]
    assert f"changed since in this tree: {KERNEL}" in render_markdown(payload)


def test_a_failed_result_fails_the_report(tmp_path):
    path = _write(tmp_path / "f.json", {"kind": "fixed-work", "ok": False,
                                        "headline": ["3 of 180 texts differ"]})
    result = make_report(ReportSettings(inputs=(str(path),), out=str(tmp_path / "r")))
    assert result.exit_code == 1 and not result.payload["ok"]
    assert result.payload["results"][0]["headline"] == ["3 of 180 texts differ"]


def test_one_failed_result_among_passing_ones_fails_the_report(tmp_path):
    good = _write(tmp_path / "g.json", {"kind": "fixed-work", "ok": True,
                                        "headline": ["180/180 exact"]})
    bad = _write(tmp_path / "f.json", {"kind": "fixed-work", "ok": False,
                                       "headline": ["3 of 180 texts differ"]})
    result = make_report(ReportSettings(inputs=(str(good), str(bad)), out=str(tmp_path / "r")))
    assert result.exit_code == 1 and not result.payload["ok"]
    assert result.payload["counts"] == {"fail": 1, "pass": 1}


def test_files_written_and_the_html_embeds_the_plots(results, tmp_path):
    out = tmp_path / "r"
    result = make_report(ReportSettings(inputs=(str(results),), out=str(out)))
    assert sorted(p.name for p in out.iterdir()) == ["repro.html", "repro.json", "repro.md",
                                                    "repro_summary.md"]
    html = (out / "repro.html").read_text()
    assert html.count('src="data:image/png;base64,') == 1          # the e2e samples plot
    assert 'href="../results/e2e/e2e.json"' in html
    assert json.loads((out / "repro.json").read_text())["schema"] == "det-suite/repro-report/1"
    assert result.exit_code == 0


def test_the_report_does_not_read_itself_back(results, tmp_path):
    out = results / "report"
    make_report(ReportSettings(inputs=(str(results),), out=str(out)))
    again = build_report(ReportSettings(inputs=(str(results),), out=str(out)))
    assert len(again["results"]) == 4


def test_step_summary_is_appended_to_what_the_job_wrote(results, tmp_path, monkeypatch):
    summary = tmp_path / "step_summary.md"
    summary.write_text("## earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    make_report(ReportSettings(inputs=(str(results),), out=str(tmp_path / "r"),
                               step_summary=""))
    text = summary.read_text()
    assert text.startswith("## earlier step\n## det-suite reproducibility report: PASS")


def test_step_summary_needs_a_file(results, tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    with pytest.raises(ValueError, match="GITHUB_STEP_SUMMARY is not set"):
        make_report(ReportSettings(inputs=(str(results),), out=str(tmp_path / "r"),
                                   step_summary=""))


@pytest.mark.skipif(not (REPO_ROOT / evidence_summary.EVIDENCE_ROOT / "sm90").is_dir(),
                    reason="docs/evidence is absent from this checkout")
def test_the_committed_gpu_evidence_reads_as_passing_results(tmp_path):
    raw = evidence_summary.unpack_raw(REPO_ROOT / evidence_summary.EVIDENCE_ROOT / "sm90",
                                      tmp_path / "raw")
    payload = build_report(ReportSettings(inputs=(str(raw),), out=str(tmp_path / "report")))
    kinds = {r["kind"] for r in payload["results"]}
    assert kinds >= {"invariance", "lint", "gemm-bench", "gpu-suite"}
    assert all(r["status"] == "pass" for r in payload["results"])
    assert payload["kernel_hashes"]["recorded_by"]
    assert payload["machines"][0]["fields"]["GPU"] == "NVIDIA H200"


@pytest.mark.parametrize("argv, code, message", [
    (["nothing-here"], 2, "does not exist"),
    (["--step-summary"], 2, "GITHUB_STEP_SUMMARY is not set"),
], ids=["missing-input", "step-summary-without-env"])
def test_cli_usage_errors(results, tmp_path, capsys, monkeypatch, argv, code, message):
    from det_suite.cli import main

    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.chdir(tmp_path)
    inputs = [] if argv[0] == "nothing-here" else [str(results)]
    assert main(["report", *inputs, *argv, "--out", str(tmp_path / "r")]) == code
    assert message in capsys.readouterr().err


def test_cli_writes_the_report(results, tmp_path, capsys):
    from det_suite.cli import main

    assert main(["report", str(results), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "report: End-to-end timing: PASS" in out and "repro.html" in out
