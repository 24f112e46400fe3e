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


def test_git_revision_says_when_the_package_differs_from_head(monkeypatch):
    """A results file names the commit only when the code that ran is that commit."""
    import subprocess

    from det_suite import report

    def fake_run(cmd, **kwargs):
        out = "abc123\n" if cmd[:2] == ["git", "rev-parse"] else " M ops.py\n"
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")
    monkeypatch.setattr(report.subprocess, "run", fake_run)
    assert report._git_revision() == "abc123+modified"
