"""det-suite reference-check: det mode against the fp32 dequantized reference forward, beside
the stock path (checks.reference_agreement)."""

import pytest

from det_suite.checks.reference_agreement import ReferenceSettings, run_reference_agreement

pytestmark = pytest.mark.model

SMALL = dict(model="synthetic:tiny?seed=0", prompts=2, prompt_len=12, max_new_tokens=2,
             progress=None)


@pytest.fixture(scope="module")
def result():
    return run_reference_agreement(ReferenceSettings(**SMALL))


def test_both_arms_are_scored_on_every_logprob(result):
    for arm in result.arms.values():
        assert arm.logprobs == 2 * (12 - 1 + 2)
    print({k: (v.max_abs, v.mean_abs) for k, v in result.arms.items()})


def test_det_mode_is_as_close_to_the_reference_as_the_stock_path(result):
    assert result.passed, result.problems


def test_a_tolerance_below_the_fp8_rounding_fails_the_check(result):
    """The positive control: the same run judged with a tolerance no FP8 path can meet."""
    tight = run_reference_agreement(ReferenceSettings(**{**SMALL, "tolerance": 1e-6}))
    assert not tight.passed and "tolerance" in tight.problems[0]


@pytest.mark.parametrize("field,value", [("prompts", 0), ("prompt_len", 1),
                                         ("tolerance", 0.0), ("stock_margin", -1.0)])
def test_bad_settings_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        ReferenceSettings(**{**SMALL, field: value})
