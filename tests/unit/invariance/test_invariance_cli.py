"""`det-suite invariance`: exit codes, printed table, JSON/Markdown/heatmap files.

Runs in-process on the CPU (Triton interpreter) with small shapes; custom module:function
providers from this file keep the exit-code tests fast.
"""

import json
import sys

import pytest
import torch

from det_suite.cli import main

SMALL = ["--shapes", "64,80", "--m", "1", "17", "33", "--m-full", "40", "--no-graph",
         "--no-instruction-table", "--quiet"]


def _q(x, xs):
    return (x.float() / xs).clamp(-448, 448).to(torch.float8_e4m3fn).float()


def rowwise_linear(x, w, ws, xs, bias):
    """Invariant by construction: every row is its own (1, K) product."""
    k = x.shape[-1]
    q = _q(x.reshape(-1, k), xs)
    y = torch.cat([q[i:i + 1] @ w.float().t() for i in range(q.shape[0])]) * (xs * ws)
    y = y + bias.float() if bias is not None else y
    return y.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])


def m_dependent_linear(x, w, ws, xs, bias):
    """Sums K in two halves when called with more than 32 rows."""
    k = x.shape[-1]
    q = _q(x.reshape(-1, k), xs)
    if q.shape[0] <= 32:
        return rowwise_linear(x, w, ws, xs, bias)
    h = k // 2
    wf = w.float()
    y = torch.cat([q[i:i + 1, :h] @ wf[:, :h].t() + q[i:i + 1, h:] @ wf[:, h:].t()
                   for i in range(q.shape[0])]) * (xs * ws)
    y = y + bias.float() if bias is not None else y
    return y.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])


ROWWISE = f"{__name__}:rowwise_linear"
VARIANT = f"{__name__}:m_dependent_linear"


def run(tmp_path, *args):
    return main(["invariance", "--out", str(tmp_path), *args])


@pytest.fixture(scope="module")
def kernel_run(tmp_path_factory):
    """One CLI run of det-suite's kernel arms and the control: (exit code, stdout, out dir)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("inv")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["invariance", "--out", str(out), "--providers", "det_suite:s2",
                     "det_suite:s3", "control", *SMALL])
    return code, buffer.getvalue(), out


# ---------------------------------------------------------------- a passing run

def test_kernel_run_passes_with_control_flagged(kernel_run):
    code, stdout, _ = kernel_run
    assert code == 0 and "result: PASS" in stdout and "flagged (control)" in stdout


def test_printed_table_has_provider_shape_m_class_rows(kernel_run):
    _, stdout, _ = kernel_run
    assert "provider" in stdout and "M class" in stdout and "first differing M" in stdout
    assert any(line.startswith("control") and "64x80" in line and "DIFFERS" in line
               for line in stdout.splitlines())


def test_json_counts_every_comparison_and_states_the_machine(kernel_run):
    _, _, out = kernel_run
    payload = json.loads((out / "invariance.json").read_text())
    counts = payload["counts"]
    assert counts["total"] == sum(counts["by_provider"].values()) > 0
    assert payload["machine"] == payload["environment"]["machine"] and payload["machine"]
    assert payload["ok"] is True and payload["exit_code"] == 0
    assert counts["by_kind"]["pipeline_ab"] > 0 and counts["by_kind"]["suffix"] > 0


def test_markdown_has_verdicts_table_and_machine(kernel_run):
    _, _, out = kernel_run
    text = (out / "invariance.md").read_text()
    assert "**Machine:**" in text and "## Verdicts" in text
    assert "| provider | shape | M class |" in text


def test_heatmap_written_when_matplotlib_present(kernel_run):
    pytest.importorskip("matplotlib")
    _, _, out = kernel_run
    assert (out / "invariance_heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- exit codes

@pytest.mark.parametrize("args,code", [
    pytest.param(["--providers", ROWWISE], 0, id="claimed-invariant-passes"),
    pytest.param(["--providers", VARIANT], 1, id="claimed-but-variant-fails"),
    pytest.param(["--providers", VARIANT, "--no-claim", VARIANT], 0, id="no-claim-measured"),
    pytest.param(["--providers", VARIANT, "--expect-variant", VARIANT], 0,
                 id="control-flagged-passes"),
    pytest.param(["--providers", ROWWISE, "--expect-variant", ROWWISE], 1,
                 id="blind-control-fails"),
])
def test_exit_code_reflects_claims_and_controls(tmp_path, capsys, args, code):
    assert run(tmp_path, *args, *SMALL, "--no-heatmap") == code


def test_blind_control_failure_says_why(tmp_path, capsys):
    run(tmp_path, "--providers", ROWWISE, "--expect-variant", ROWWISE, *SMALL, "--no-heatmap")
    assert "could not detect a schedule change" in capsys.readouterr().out


@pytest.mark.parametrize("args", [
    pytest.param(["--providers", "nope"], id="unknown-provider"),
    pytest.param(["--shapes", "64"], id="bad-shape"),
    pytest.param(["--providers", "flashinfer_bmm_fp8"], id="named-provider-unavailable"),
    pytest.param(["--providers", ROWWISE, "--no-claim", "control"], id="no-claim-unselected"),
    pytest.param(["--m", "0"], id="m-zero"),
])
def test_usage_errors_exit_2(tmp_path, capsys, args):
    assert run(tmp_path, *args, "--quiet") == 2
    assert "error" in capsys.readouterr().err


# ---------------------------------------------------------------- optional parts

def test_heatmap_skipped_with_note_without_matplotlib(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert run(tmp_path, "--providers", ROWWISE, *SMALL) == 0
    assert "heatmap skipped" in capsys.readouterr().out
    assert (tmp_path / "invariance.json").exists() and not (tmp_path /
                                                            "invariance_heatmap.png").exists()


def test_instruction_table_section_says_not_available_without_the_lint(
        tmp_path, capsys, monkeypatch):
    import det_suite
    # `from det_suite import lint` finds an imported submodule on the package first.
    monkeypatch.delattr(det_suite, "lint", raising=False)
    monkeypatch.setitem(sys.modules, "det_suite.lint", None)
    args = [a for a in SMALL if a != "--no-instruction-table"]
    assert run(tmp_path, "--providers", ROWWISE, *args, "--no-heatmap") == 0
    payload = json.loads((tmp_path / "invariance.json").read_text())
    assert payload["instruction_table"]["available"] is False
    assert "Not available" in (tmp_path / "invariance.md").read_text()


def test_instruction_table_embedded_when_the_lint_provides_it(tmp_path, monkeypatch):
    import types
    fake = types.ModuleType("det_suite.lint")
    fake.instruction_table = lambda families: {"families": list(families)}
    fake.render_markdown = lambda data: "| arch | instruction |\n| --- | --- |\n"
    import det_suite
    monkeypatch.setattr(det_suite, "lint", fake, raising=False)
    monkeypatch.setitem(sys.modules, "det_suite.lint", fake)
    args = [a for a in SMALL if a != "--no-instruction-table"]
    assert run(tmp_path, "--providers", "det_suite:s2", *args, "--no-heatmap") == 0
    payload = json.loads((tmp_path / "invariance.json").read_text())
    assert payload["instruction_table"]["table"]["families"] == ["sm120"]
    assert "| arch | instruction |" in (tmp_path / "invariance.md").read_text()


def test_default_cpu_run_passes_with_the_control_flagged(tmp_path, capsys):
    """The command as CI runs it without a GPU: quick matrix, default providers. (How long
    it takes is CI's whole-run limit to police, not a wall-clock assertion that a loaded
    2-core runner would fail at random.)"""
    code = run(tmp_path, "--quiet", "--no-instruction-table")
    assert code == 0
    payload = json.loads((tmp_path / "invariance.json").read_text())
    assert payload["config"]["mode"] == "quick" and payload["graph_skipped"]
    control = next(v for v in payload["verdicts"] if v["provider"] == "control")
    assert control["ok"] and control["differing"] > 0


def test_cells_aggregate_rows_max_diff_and_first_differing_m():
    from det_suite.invariance.compare import Comparison
    from det_suite.invariance.report import cells

    def c(m, equal, rows=0, diff=0.0, kind="suffix"):
        return Comparison("p", "case", "s", kind, m, 100, equal, rows, diff)
    (small, large) = cells([c(3, True), c(9, False, 2, 0.5), c(5, False, 1, 2.0),
                            c(40, True, kind="composition")])
    assert (small["m_class"], small["comparisons"], small["exact"], small["mismatching_rows"],
            small["max_abs_diff"], small["first_differing_m"]) == ("1-16", 3, False, 3, 2.0, 5)
    assert (large["m_class"], large["exact"], large["first_differing_m"],
            large["by_kind"]["composition"]) == ("33-64", True, None, 1)
