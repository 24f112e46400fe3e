"""`det-suite run` (the README's main command) on this machine."""

import json

from det_suite.cli import main


def test_run_passes_and_writes_a_reviewable_report(tmp_path, capsys):
    code = main(["run", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "det-suite run: PASS" in out
    payload = json.loads((tmp_path / "invariance.json").read_text())
    assert (tmp_path / "invariance.md").exists()
    verdicts = {v["provider"]: v for v in payload["verdicts"]}
    control = [v for v in verdicts.values() if v.get("expect_variant")]
    assert control and all(v["differing"] > 0 for v in control)
    claimed = [v for v in verdicts.values() if v["claims_invariance"]]
    assert claimed and all(v["differing"] == 0 and v["comparisons"] > 0 for v in claimed)
    # The model layer: det mode exact after proven hits on the tiny synthetic model.
    assert "det-suite run: model (cache-hit on synthetic:tiny?seed=0, det mode): PASS" in out
    hit = json.loads((tmp_path / "cache_hit" / "cache_hit.json").read_text())
    det = [c for c in hit["comparisons"] if c["mode"] == "det"]
    assert hit["det_exact"] and det and all(c["hit_proven"] and c["exact"] for c in det)
    assert any(c["cached_tokens"] > 0 for c in det)


def test_git_revision_names_a_modified_tree_by_its_diff(monkeypatch):
    """A results file names the bare commit only when the code that ran is that commit."""
    import subprocess

    from det_suite.reports import environment as report, provenance

    def fake_run(cmd, **kwargs):
        out = {"rev-parse": b"abc123\n", "diff": b"--- a/ops.py\n+++ b/ops.py\n",
               "ls-files": b""}[cmd[1]]
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr=b"")
    monkeypatch.delenv(provenance.REVISION_ENV, raising=False)
    monkeypatch.setattr(provenance.subprocess, "run", fake_run)
    assert report.git_revision().startswith("abc123+diff.")
