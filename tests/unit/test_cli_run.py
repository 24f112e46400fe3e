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
