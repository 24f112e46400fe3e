"""The warp-specialised kernel's lint rule: cross-compiled for sm_90 on the CPU, its PTX holds
one MMA instruction along K (the entry's wgmma k32 e4m3) and promotes every PROMOTE_K
elements (`lint.ptx_promotion`); a kernel promoting at another interval is flagged."""

from dataclasses import replace

import pytest

from det_suite import lint
from det_suite.lint.ptx_promotion import promotion_groups, promotion_problem
from det_suite.lint.variants import (WARP_SPECIALIZED_CHECK, GemmCase, gemm_launches,
                                     warp_specialized_candidate)
from det_suite.policy import LaunchConfig, parse_policy, shipped_policy
from det_suite.policy.tiles import promotion_k
from det_suite.policy.warp_specialized import gluon_release_supported

SM90 = 90
PROMOTE_K = promotion_k("sm90")
PINGPONG = "fp8_scaled_mm_pingpong_kernel"

needs_gluon_release = pytest.mark.skipif(
    not gluon_release_supported(), reason="the kernel's Gluon code is written for Triton 3.6")


def pingpong_config(promote_k=PROMOTE_K, split_k=1):
    return LaunchConfig(block_m=128, block_n=128, block_k=256, num_warps=8, num_stages=3,
                        split_k=split_k, group_m=8, use_workspace=False, use_tma=True,
                        promote_k=promote_k, warp_specialized=True)


def compile_pingpong(config, k=4096):
    (launch,) = gemm_launches(GemmCase(config, 4096, 4096, k), pointer_fallback=False)
    ((call, bound),) = launch.calls
    assert call.kernel == PINGPONG
    (outcome,) = lint.compile_outcomes([lint.specialize(bound, call.module, call.kernel, SM90)],
                                       workers=1)
    assert outcome.ok, outcome.error
    return outcome


PTX = """
  wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {...};
  wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {...};
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 1;
  wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {...};
  wgmma.wait_group.sync.aligned 0;
  add.f32 %f1, %f1, %f2;
  wgmma.wait_group.sync.aligned 0;
"""


def test_promotion_groups_count_k_between_full_waits():
    assert promotion_groups(PTX) == [96]  # a wait_group 1 does not close a group
    assert promotion_problem([96], 96) is None
    assert "every 96 elements" in promotion_problem([96], 256)
    assert "cannot be found" in promotion_problem([], 256)


@needs_gluon_release
@pytest.mark.parametrize("split_k", [1, 3], ids=["unsplit", "split3"])
def test_pingpong_promotes_at_the_family_interval_with_one_mma(split_k):
    outcome = compile_pingpong(pingpong_config(split_k=split_k), k=12288)
    groups = outcome.promotion_groups
    print(f"{len(groups)} promotion groups of {sorted(set(groups))} K elements")
    assert groups and set(groups) == {PROMOTE_K}
    assert {i.signature for i in outcome.instructions} == {("wgmma", 32, "e4m3")}


@needs_gluon_release
def test_rule_flags_a_kernel_promoting_at_another_interval():
    """Positive control: the kernel built to promote every 512 (two K steps an interval)
    while SM90 declares 256 must be flagged."""
    outcome = compile_pingpong(pingpong_config(promote_k=2 * PROMOTE_K))
    problem = promotion_problem(outcome.promotion_groups, PROMOTE_K)
    print(problem)
    assert problem and f"every {2 * PROMOTE_K} elements" in problem


@needs_gluon_release
def test_shipped_sm90_tiles_that_could_run_it_are_compiled_that_way():
    entry = shipped_policy("sm90").default
    candidates = [warp_specialized_candidate(c) for c in entry.variants()]
    assert [c is not None for c in candidates] == [False, False, False, True]
    assert candidates[-1].reduction_schedule(4096) == entry.variants()[-1].reduction_schedule(4096)


def test_tiles_that_cannot_run_it_are_not_candidates():
    base = pingpong_config()
    for change in (dict(block_m=64), dict(swap_ab=True), dict(use_workspace=True, split_k=2),
                   dict(use_pdl=True), dict(promote_k=None), dict(block_k=128)):
        assert warp_specialized_candidate(replace(base, warp_specialized=False, **change)) \
            is None, change


@needs_gluon_release
def test_table_with_a_warp_specialized_tile_lints_clean():
    raw = {"family": "sm90", "expected_mma": "wgmma m64nNk32 e4m3", "default": {
        "block_n": 128, "block_k": 256, "m_tiles": [
            {"max_m": 256, "block_m": 64, "num_warps": 4, "num_stages": 4, "use_tma": True},
            {"max_m": None, "block_m": 128, "num_warps": 8, "num_stages": 3, "use_tma": True,
             "warp_specialized": True}]},
        "entries": []}
    result = lint.lint_table(parse_policy(raw, "candidate.json"), override_stages=(),
                             include_fixed=False, jobs=1)
    variants = [v for t in result.tables for e in t.entries for v in e.variants]
    pingpong = [v for v in variants if v.kernel == PINGPONG]
    print(f"{len(variants)} variants, {len(pingpong)} warp-specialised: {result.violations}")
    assert pingpong and all(v.launch != WARP_SPECIALIZED_CHECK for v in pingpong)
    assert result.ok, result.violations
