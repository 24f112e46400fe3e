"""The GSM8K fixture check's positive control (`check_gsm8k(control=True)`): the fixture's
work runs on the m-dependent arm and must differ. Exit codes invert: a differing row flags
the control (0), every row exact means the check showed nothing (1, named). On the tiny
model's committed one-row fixture the arm's four greedy tokens match (docs/model-controls.md),
so here the control reports itself not flagged, which is the honest verdict on that fixture."""

from pathlib import Path

import pytest

pytest.importorskip("datasets", reason="needs datasets (pip install 'det-suite[gsm8k]')")

from det_suite.checks.gsm8k import (CONTROL_NOT_SHOWN, CheckResult, CheckSettings,  # noqa: E402
                                    check_gsm8k, verdict_lines)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "gsm8k"


@pytest.mark.parametrize("status, code", [("differs", 0), ("exact", 1),
                                          ("not comparable", 3)])
def test_the_control_passes_by_differing(status, code):
    assert CheckResult(status, "f.json", control=True).exit_code == code
    assert CheckResult(status, "f.json").exit_code == {"differs": 1, "exact": 0}.get(status, 3)


@pytest.mark.model
def test_the_control_on_the_tiny_fixture_runs_the_m_dependent_arm(kernel_device):
    from det_suite.models.synthetic import build_synthetic

    tiny = build_synthetic("tiny", 0)
    result = check_gsm8k(CheckSettings(fixtures=str(FIXTURES), model="synthetic:tiny?seed=0",
                                       device=kernel_device, progress=False, control=True),
                         checkpoint=tiny)
    if result.status == "not comparable":
        pytest.skip("no fixture comparable with this machine: " + "; ".join(result.reasons))
    assert result.run.settings["mode"] == "m-dependent"
    assert result.status == "exact" and result.exit_code == 1
    assert any(CONTROL_NOT_SHOWN in line for line in verdict_lines(result))


def test_the_control_refuses_a_pinned_pipeline_depth():
    with pytest.raises(ValueError, match="stages"):
        check_gsm8k(CheckSettings(fixtures=str(FIXTURES), model="synthetic:tiny?seed=0",
                                  device="cpu", progress=False, control=True, stages=2))
