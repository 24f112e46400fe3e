"""What the commands print names things as a user types them (issue 38, item 9): flags as
`--force` / `--fixture`, the positive control's counts labelled, no "(default: None)" in
help, and `invariance` announcing only the cases that will run here."""

from __future__ import annotations

import pytest

from det_suite.cli import build_parser, main


def _help(capsys, *command) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [("bench", "e2e"), ("bench", "gemm"), ("tune",)],
                         ids=["bench-e2e", "bench-gemm", "tune"])
def test_help_shows_only_real_defaults(capsys, command):
    text = _help(capsys, *command)
    assert "(default: None)" not in text and "(default: False)" not in text


def test_help_still_shows_a_real_default(capsys):
    """Control: an option with a default keeps it in its help."""
    assert "(default: ABBA)" in " ".join(_help(capsys, "bench", "e2e").split())


def test_a_fixture_that_exists_is_refused_naming_the_force_flag(tmp_path, capsys):
    args = ["gsm8k", "record", "--fixtures", str(tmp_path), "--device", "cpu",
            "--no-progress", "--rows", "32", "--max-new-tokens", "1"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    assert "pass --force to record over it" in capsys.readouterr().err


def test_check_without_a_model_or_fixture_names_the_flags(tmp_path, capsys):
    assert main(["gsm8k", "check", "--fixtures", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--model: required" in err and "(or pass --fixture)" in err


def test_the_progress_line_labels_the_positive_controls_share():
    from det_suite.invariance.compare import Comparison, Recorder
    from det_suite.invariance.runner import _Mark

    rec = Recorder()
    mark = _Mark(rec, {"control"})
    for provider, equal in [("det", True), ("det", True), ("control", False),
                            ("control", True)]:
        rec.add(Comparison(provider, "case", "shape", "suffix", 1, 2, equal))
    line = mark.line(1, 4, "case")
    assert "4 comparisons, 1 differ (positive control: 2 comparisons, 1 differ)" in line


def test_invariance_on_a_cpu_does_not_announce_graph_cases(monkeypatch):
    """Graph cases need CUDA; on the CPU the announcement counts only what runs."""
    from det_suite.invariance import harness, runner

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    lines = []
    monkeypatch.setattr(runner, "run", stop)
    with pytest.raises(Stop):
        harness.run_invariance(harness.InvarianceSettings(device="cpu", mode="quick"),
                               progress=lines.append)
    assert "quick matrix, 4 cases, providers" in lines[0] and "graph" not in lines[0]
