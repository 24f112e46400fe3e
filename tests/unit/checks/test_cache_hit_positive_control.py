"""The cache-hit verdict's positive control: the m-dependent arm is flagged only by a proven
hit whose outputs differ from cold prefill; when it runs and nothing flags it, the check
fails (exit 1) and says it could not show that it detects a schedule change, even with det
mode exact; it runs by default on the embedded engine and never on SGLang."""

import pytest

from det_suite.checks.cache_hit import (M_DEPENDENT, NOT_SHOWN, CacheHitResult,
                                        CacheHitSettings, Comparison)
from det_suite.checks.cache_hit_report import verdict_lines

MODES = ("det", "stock", M_DEPENDENT)


def _row(mode, phase="hit", *, exact=True, cached=8, delta=None):
    return Comparison(mode=mode, engine="eager", prefix=12, batch=1, rep=0, phase=phase,
                      cached_tokens=cached, values=7,
                      max_abs_delta=0.0 if exact else (delta or 0.25), tokens_equal=True,
                      exact=exact, hit_proven=cached > 0 if phase in ("hit", "warm") else True)


def _result(rows, modes=MODES):
    return CacheHitResult(settings={"modes": modes, "model": "m", "backend": "embedded"},
                          comparisons=rows, seconds=1.0, skipped=[])


DET_EXACT = [_row("det"), _row("det", "warm")]


def test_a_differing_proven_hit_flags_the_control_and_the_check_passes():
    result = _result(DET_EXACT + [_row(M_DEPENDENT, exact=False), _row(M_DEPENDENT, "warm")])
    assert result.control_flagged is True
    assert len(result.control_differences()) == 1
    assert result.exit_code == 0
    line = [x for x in verdict_lines(result) if M_DEPENDENT in x][0]
    assert "flagged" in line and "1 of 2" in line


@pytest.mark.parametrize("control_rows", [
    pytest.param([_row(M_DEPENDENT), _row(M_DEPENDENT, "warm")], id="every-hit-exact"),
    pytest.param([_row(M_DEPENDENT, exact=False, cached=0)], id="differs-without-a-hit"),
    pytest.param([_row(M_DEPENDENT), _row(M_DEPENDENT, "cold-vs-eager", exact=False)],
                 id="only-cold-runs-differ"),
    pytest.param([], id="no-rows"),
])
def test_an_unflagged_control_fails_the_check_although_det_is_exact(control_rows):
    result = _result(DET_EXACT + control_rows)
    assert result.det_exact
    assert result.control_flagged is False
    assert result.exit_code == 1
    assert any(NOT_SHOWN in line and "FAIL" in line for line in verdict_lines(result))


def test_det_not_exact_fails_even_with_the_control_flagged():
    result = _result([_row("det", exact=False)] + [_row(M_DEPENDENT, exact=False)])
    assert result.control_flagged is True and result.exit_code == 1


def test_without_the_control_the_report_says_so_and_det_alone_decides():
    result = _result(DET_EXACT, modes=("det", "stock"))
    assert result.control_flagged is None and result.exit_code == 0
    assert any("not run" in line and M_DEPENDENT in line for line in verdict_lines(result))


def test_the_control_alone_must_still_be_flagged():
    assert _result([_row(M_DEPENDENT)], modes=(M_DEPENDENT,)).exit_code == 1
    assert _result([_row(M_DEPENDENT, exact=False)], modes=(M_DEPENDENT,)).exit_code == 0


def test_the_control_runs_by_default_on_the_embedded_engine_only():
    assert M_DEPENDENT in CacheHitSettings(progress=None).modes
    assert M_DEPENDENT not in CacheHitSettings(backend="sglang", progress=None).modes
    with pytest.raises(ValueError, match="embedded engine only"):
        CacheHitSettings(backend="sglang", modes=("det", M_DEPENDENT), progress=None)


def test_the_reproducibility_report_reads_the_exit_code_not_det_mode_alone():
    from det_suite.reports.repro.kinds import summarize

    payload = {"det_exact": True, "exit_code": 1, "settings": {"modes": list(MODES)},
               "verdict": [f"positive control ({M_DEPENDENT}): NOT flagged"]}
    assert summarize("cache-hit", payload)["status"] == "fail"
    assert summarize("cache-hit", {**payload, "exit_code": 0})["status"] == "pass"
