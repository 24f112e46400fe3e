"""FP8 route dispatch mirrors the seed: only deterministic mode on SM12x changes."""

import pytest

from det_suite.ops.dispatch import OTHER_ARCH_ENV, Fp8Route, select_fp8_route


@pytest.mark.parametrize("family", ["sm89", "sm90", "sm100", "sm120", "default"])
@pytest.mark.parametrize("deterministic", [False, True], ids=["normal", "deterministic"])
def test_forced_marlin_is_unchanged(family, deterministic):
    decision = select_fp8_route(family=family, deterministic=deterministic, force_marlin=True)
    assert decision.route is Fp8Route.MARLIN


@pytest.mark.parametrize("family", ["sm89", "sm90", "sm100", "sm120", "default"])
def test_normal_mode_is_unchanged(family):
    assert select_fp8_route(family=family, deterministic=False).route is Fp8Route.UPSTREAM


def test_deterministic_sm120_uses_det_suite_kernel():
    decision = select_fp8_route(family="sm120", deterministic=True)
    assert decision.route is Fp8Route.DET_SUITE


@pytest.mark.parametrize("family", ["sm89", "sm90", "sm100", "default"])
def test_other_families_default_to_upstream_and_say_so(family, monkeypatch):
    monkeypatch.delenv(OTHER_ARCH_ENV, raising=False)
    decision = select_fp8_route(family=family, deterministic=True)
    assert decision.route is Fp8Route.UPSTREAM
    assert "(default)" in decision.reason


def test_environment_overrides_other_family_policy(monkeypatch):
    monkeypatch.setenv(OTHER_ARCH_ENV, "det_suite")
    decision = select_fp8_route(family="sm90", deterministic=True)
    assert decision.route is Fp8Route.DET_SUITE
    assert OTHER_ARCH_ENV in decision.reason


def test_argument_beats_environment(monkeypatch):
    monkeypatch.setenv(OTHER_ARCH_ENV, "det_suite")
    decision = select_fp8_route(family="sm90", deterministic=True, other_arch="upstream")
    assert decision.route is Fp8Route.UPSTREAM
    assert "argument" in decision.reason


@pytest.mark.parametrize("source", ["argument", "environment"])
def test_invalid_other_arch_policy_is_an_error(source, monkeypatch):
    kwargs = {}
    if source == "argument":
        kwargs["other_arch"] = "cublas"
    else:
        monkeypatch.setenv(OTHER_ARCH_ENV, "cublas")
    with pytest.raises(ValueError, match="'cublas' is not a valid other-arch policy"):
        select_fp8_route(family="sm90", deterministic=True, **kwargs)


def test_unknown_family_is_an_error():
    with pytest.raises(ValueError, match="'sm75' is not a GPU family"):
        select_fp8_route(family="sm75", deterministic=True)
