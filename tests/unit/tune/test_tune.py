"""`det-suite tune`: candidate generation, M-class selection, the invariance check that
rejects a candidate before it can be stored, and the tuner's flow with a fake timing
function. Checks run real kernels: on the Triton interpreter (tiny shapes) on CPU, on the
GPU when there is one.

Under the interpreter tl.dot is numpy's matmul, whose BLAS kernel rounds a row differently
depending on its position in the tile, which the cancellation stress data exposes; CPU
runs therefore compare prefix rows of entries with one BLOCK_M (see
det_suite.invariance.compare.prove_entry, the prover the tuner's checks run through).
"""

import json
from dataclasses import replace

import pytest
import torch

from det_suite.platform.family import KNOWN_FAMILIES
from det_suite.policy.tiles import promotion_k
from det_suite.bench.gemm import GemmShape
from det_suite.cli import main
from det_suite.commands.tune import _defaults
from det_suite.invariance.cases import gemm_operands
from det_suite.invariance.compare import SplitKByM, run_gemm
from det_suite.policy import (LaunchConfig, MTile, TableEntry, entry_json, load_policy_file,
                              m_tile_json, parse_policy, shipped_families, shipped_policy)
from det_suite.tune import (
    CHECK_BIG_M, CHECK_DATA, CHECK_MS, CLASS_MS, FAMILY_BLOCK_M, SCREEN_MS, SPLIT_K_CHOICES,
    SWAP_BLOCK_M,
    CheckResult, CheckFailure, Reduction, TuneSettings, Tuner, Variant, accumulator_fits,
    axis_variants, block_m_choices, build_m_tiles, check_entry, check_invariance,
    class_bounds, combine_axes, launch_config, make_entry, rank_reductions, resolve_family,
    swap_variant, reduction_candidates, representative_variant, tuned_on, tuned_policy_json,
    valid_split_ks, variant_space, write_tuned_policy)

FAMILIES = list(KNOWN_FAMILIES) + ["default"]
N, K = 64, 512          # 4 K tiles of 128: split_k 1, 2 and 4 are valid
CHECK_MS_SMALL = (1, 7, 33, 65)
BIG_M_SMALL = 97


def subsets_for(device):
    return ("prefix",) if device == "cpu" else ("prefix", "suffix")


# ------------------------------------------------------------------ candidates

@pytest.mark.parametrize("m", [1, 16, 33, 128, 8192], ids=lambda m: f"m{m}")
@pytest.mark.parametrize("family", FAMILIES)
def test_block_m_choices_stay_in_the_family_safe_set(family, m):
    choices = block_m_choices(family, m)
    assert choices and set(choices) <= set(FAMILY_BLOCK_M[family])


def test_sm90_never_offers_mma_sync_tiles():
    """BLOCK_M 16/32 compile to mma.sync k16 on Hopper, 64/128 to wgmma k32 (docs/invariance-rule.md)."""
    offered = {b for m in range(1, 300) for b in block_m_choices("sm90", m)}
    assert offered == {64, 128}


@pytest.mark.parametrize("m", [1, 16, 128, 2048], ids=lambda m: f"m{m}")
@pytest.mark.parametrize("family", FAMILIES)
def test_variant_space_uses_only_instruction_safe_block_m(family, m):
    """Unswapped tiles use the family's safe BLOCK_M; swapped ones (the weight on the MMA's
    row side) only the family's swapped token tiles, always by TMA."""
    variants = variant_space(family, m, Reduction(128, 128, 2))
    assert variants and {v.block_m for v in variants if not v.swap_ab} \
        <= set(FAMILY_BLOCK_M[family])
    swapped = [v for v in variants if v.swap_ab]
    assert {v.block_m for v in swapped} <= set(SWAP_BLOCK_M.get(family, ()))
    assert all(v.use_tma for v in swapped)


def test_variant_space_leaves_out_spilling_accumulators():
    variants = variant_space("sm90", 2048, Reduction(256, 128, 1))
    assert not any(v.block_m == 128 and v.num_warps == 4 for v in variants)
    assert any(v.block_m == 128 and v.num_warps == 8 for v in variants)


@pytest.mark.parametrize("split_k,m,allowed", [(1, 1, False), (2, 1, True), (2, 128, True),
                                               (2, 129, False), (4, 8192, False)],
                         ids=["unsplit", "split-m1", "split-m128", "split-m129",
                              "split-m8192"])
def test_workspace_only_for_split_k_at_small_m(split_k, m, allowed):
    variants = variant_space("sm90", m, Reduction(128, 128, split_k))
    assert any(v.use_workspace for v in variants) == allowed


@pytest.mark.parametrize("family,tma", [("sm90", True), ("sm100", True), ("sm120", True),
                                        ("sm89", False), ("default", False)])
def test_tma_variants_only_on_families_with_tma(family, tma):
    variants = variant_space(family, 128, Reduction(128, 128, 1))
    assert any(v.use_tma for v in variants) == tma


@pytest.mark.parametrize("k,block_k,expected", [
    (128, 128, (1,)), (256, 128, (1, 2)), (384, 128, (1, 2, 3)), (512, 128, (1, 2, 4)),
    (640, 128, (1, 2, 3)), (4096, 128, (1, 2, 3, 4, 6, 8)), (4096, 64, (1, 2, 3, 4, 6, 8)),
    (17408, 128, (1, 2, 3, 4, 6, 8)), (200, 128, (1, 2))],
    ids=lambda v: str(v) if not isinstance(v, tuple) else "-".join(map(str, v)))
def test_split_k_limited_by_k_tiles_without_empty_chunks(k, block_k, expected):
    assert valid_split_ks(k, block_k, SPLIT_K_CHOICES) == expected


@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 12288), (64, 512), (100, 256)],
                         ids=["qkv", "down", "tiny", "odd-n"])
def test_reduction_candidates_respect_k_tiles_and_n(n, k):
    reds = reduction_candidates(n, k, block_ks=(128, 64))
    assert reds
    for red in reds:
        assert red.split_k in valid_split_ks(k, red.block_k)
        assert red.block_n <= max(64, 1 << (n - 1).bit_length())


@pytest.mark.parametrize("n,block_n,splits", [
    (4096, 64, (1, 2, 3, 4, 6, 8)), (24576, 64, (1,)), (24576, 128, (1, 2)),
    (24576, 256, (1, 2, 3, 4)), (34816, 128, (1,))],
    ids=["o-bn64", "gate_up-bn64", "gate_up-bn128", "gate_up-bn256", "14b-gate_up-bn128"])
def test_split_k_pruned_where_small_m_already_fills_the_gpu(n, block_n, splits):
    """132 SMs: a split count whose M=1 grid exceeds 4 waves is not tried."""
    reds = reduction_candidates(n, 4096, block_ns=(block_n,), sm_count=132)
    assert tuple(r.split_k for r in reds) == splits


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("m", [1, 16, 128, 8192], ids=lambda m: f"m{m}")
def test_representative_variant_is_a_timeable_safe_variant(family, m):
    red = Reduction(256, 128, 2)
    var = representative_variant(family, m, red)
    assert var.block_m in FAMILY_BLOCK_M[family] and accumulator_fits(red, var)
    assert var.use_workspace == (m <= 128)


def test_axis_variants_differ_from_the_start_in_one_axis():
    red = Reduction(128, 128, 2)
    start = representative_variant("sm90", 128, red)
    for var in axis_variants(start, "sm90", 128, red):
        differing = [a for a in ("block_m", "num_warps", "num_stages", "use_workspace",
                                 "use_tma") if getattr(var, a) != getattr(start, a)]
        assert len(differing) <= 1, var


def test_combine_axes_takes_the_best_value_of_each_axis():
    start = Variant(64, 4, 4, True)
    timed = {start: 10.0, Variant(64, 8, 4, True): 9.0, Variant(64, 4, 3, True): 8.0,
             Variant(64, 4, 5, True): 12.0, Variant(64, 4, 4, False): 11.0}
    assert combine_axes(start, timed) == Variant(64, 8, 3, True)


# ------------------------------------------------------------------ M classes

@pytest.mark.parametrize("ms,bounds", [
    (SCREEN_MS, [4, 32, 512, 4096, None]),
    (CLASS_MS, [4, 32, 64, 256, 1024, 4096, None]),
    ((1, 2), [1, None]), ((8,), [None])], ids=["screen", "class", "adjacent", "single"])
def test_class_bounds(ms, bounds):
    assert class_bounds(ms) == bounds


def test_build_m_tiles_picks_each_timed_m_s_fastest_variant():
    best = {1: Variant(64, 4, 4), 16: Variant(64, 4, 5), 128: Variant(128, 8, 4),
            2048: Variant(128, 8, 3)}
    entry = make_entry(4096, 4096, Reduction(128, 128, 1), build_m_tiles(best))
    for m, var in best.items():
        config = entry.select(m)
        assert (config.block_m, config.num_warps, config.num_stages) == \
            (var.block_m, var.num_warps, var.num_stages)


def test_build_m_tiles_merges_equal_neighbours():
    same = Variant(64, 4, 4)
    tiles = build_m_tiles({1: same, 16: same, 128: Variant(128, 8, 3), 2048: Variant(128, 8, 3)})
    assert [(t.max_m, t.block_m) for t in tiles] == [(32, 64), (None, 128)]


def test_build_m_tiles_caps_a_workspace_tile_at_its_timed_m():
    tiles = build_m_tiles({16: Variant(64, 4, 4, True), 2048: Variant(128, 8, 3)})
    assert [(t.max_m, t.use_workspace) for t in tiles] == [(16, True), (None, False)]


def test_build_m_tiles_gives_large_m_a_plain_tile_when_the_last_class_used_the_workspace():
    tiles = build_m_tiles({1: Variant(64, 4, 4, True)})
    assert [(t.max_m, t.use_workspace) for t in tiles] == [(1, True), (None, False)]


def test_rank_reductions_prefers_the_lowest_geomean_and_puts_gaps_last():
    a, b, c = Reduction(64, 128, 1), Reduction(128, 128, 2), Reduction(256, 128, 4)
    times = {a: {1: 10.0, 8192: 100.0}, b: {1: 5.0, 8192: 150.0}, c: {1: 4.0, 8192: None}}
    ranked = rank_reductions(times, [1, 8192])
    assert [r for r, _ in ranked] == [b, a, c] and ranked[-1][1] == float("inf")


def test_make_entry_round_trips_through_the_policy_parser(tmp_path):
    entry = make_entry(4096, 12288, Reduction(64, 256, 4),
                       build_m_tiles({1: Variant(64, 4, 4, True, True),
                                      2048: Variant(128, 8, 3)}))
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"family": "sm90", "default": entry_json(
        shipped_policy("sm90").default), "entries": [entry_json(entry)]}))
    # The table's family supplies the promotion interval; the rest is the entry as made.
    assert load_policy_file(path).entry(4096, 12288) == replace(entry, promote_k=promotion_k("sm90"))


def test_make_entry_rejects_split_k_beyond_the_k_tiles():
    with pytest.raises(ValueError, match="split_k"):
        make_entry(64, 256, Reduction(64, 128, 4), (
            MTile(max_m=None, block_m=64, num_warps=4, num_stages=3),))


# ------------------------------------------------------------------ invariance check

# A deliberately broken candidate: split_k 1 for m <= `switch` (or switch < m <= `until`),
# the entry's own elsewhere, one BLOCK_M throughout: the invariance package's counterpart.
MDependentSplit = SplitKByM


def _honest(block_m=32, split_k=2):
    """A fixed schedule: the workspace for small M, single pass above; one BLOCK_M."""
    return TableEntry(N, K, 64, 128, split_k, 8, (
        MTile(max_m=16, block_m=block_m, num_warps=4, num_stages=3, use_workspace=True),
        MTile(max_m=None, block_m=block_m, num_warps=4, num_stages=3)))


def _check(entry, device, **kwargs):
    return check_invariance(entry, N, K, device=device, check_ms=CHECK_MS_SMALL,
                            big_m=BIG_M_SMALL, subsets=subsets_for(device), **kwargs)


def test_check_rejects_split_k_chosen_by_m_at_the_first_m_it_changes(device):
    result = _check(MDependentSplit(_honest(), 7, until=65), device)
    assert not result.passed
    assert result.first_differing_m == 33
    assert result.failure.kind == "invariance" and result.failure.selected
    assert result.failure.config["split_k"] == 1


def test_check_rejects_split_k_chosen_by_m_for_every_small_m(device):
    result = _check(MDependentSplit(_honest(), 65), device)
    assert not result.passed and result.first_differing_m <= 65


def test_check_rejects_a_forced_variant_even_when_m_never_selects_it(device):
    """Every m_tile variant must give the same bits, not only the ones M picks."""
    honest = _honest()
    broken = MDependentSplit(honest, 0)  # selects nothing broken, but lists it as a variant
    result = _check(broken, device)
    assert not result.passed and not result.failure.selected


def test_check_accepts_a_fixed_schedule_entry_on_dense_and_stress_data(device):
    result = check_entry(_honest(), N, K, device=device, check_ms=CHECK_MS_SMALL,
                         big_m=BIG_M_SMALL, subsets=subsets_for(device))
    assert result.passed, result.failure
    # accuracy configs + 2 data sets x (reference + natural + forced + full-batch passes)
    assert result.comparisons > 2 * len(CHECK_MS_SMALL)


def test_check_rejects_wrong_results_before_comparing_bits(device):
    def doubled(*args):
        return run_gemm(*args) * 2

    result = check_entry(_honest(), N, K, device=device, check_ms=CHECK_MS_SMALL,
                         big_m=BIG_M_SMALL, subsets=subsets_for(device), gemm=doubled)
    assert not result.passed and result.failure.kind == "accuracy"


def test_check_reports_a_config_that_cannot_launch(device):
    class Unlaunchable:
        def select(self, m):
            # BLOCK_N not a power of 2
            return LaunchConfig(block_m=32, block_n=48, block_k=128, num_warps=4, num_stages=3,
                                split_k=1, group_m=8)

        def variants(self):
            return (self.select(1),)

    result = _check(Unlaunchable(), device)
    assert not result.passed and result.failure.kind == "launch"


def test_check_needs_check_ms_below_big_m(device):
    with pytest.raises(ValueError, match="check_ms"):
        check_invariance(_honest(), N, K, device=device, check_ms=(1, 200), big_m=97)


# The stress operands' own tests (pairs cancel exactly, dense data has no zeros) are in
# test_invariance_compare.py, next to the generator's other tests.


# ------------------------------------------------------------------ parallel precompile

def test_precompile_compiles_every_gemm_kernel_and_launches_none(monkeypatch):
    """Through ops' compile launcher, launch_fp8_gemm's real argument lists reach `warmup`
    (compile only) for the pointer, TMA, swapped-operand and split-K reduction kernels
    alike, and no kernel is launched."""
    import inspect

    from det_suite.kernels import registry
    from det_suite.tune import GemmLaunch, precompile_launches

    seen = []

    class FakeKernel:
        def __init__(self, name):
            self.name = name
            real = registry.entry(name).load()
            self.signature = inspect.signature(getattr(real, "fn", real))

        def __getitem__(self, grid):
            raise AssertionError(f"{self.name} launched during precompile")

        def warmup(self, *args, grid, **kwargs):
            params = {k: v for k, v in kwargs.items() if k in self.signature.parameters}
            self.signature.bind(*args, **params)  # every parameter, none unknown
            seen.append((self.name, grid, kwargs.get("num_stages")))

    fakes = {name: FakeKernel(name) for name in registry.GEMM_KERNELS}
    monkeypatch.setattr(registry, "kernel", lambda name: fakes[name])
    operands = gemm_operands(N, K, 16, device="cpu")
    out = torch.empty((16, N), dtype=torch.bfloat16)
    one = torch.ones(1)
    base = LaunchConfig(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=3, split_k=2,
                        group_m=8, use_workspace=True, use_tma=False, fused_fixup=False)
    configs = [base, replace(base, use_tma=True, fused_fixup=True, num_stages=4),
               replace(base, block_n=64, use_tma=True, swap_ab=True)]
    launches = [GemmLaunch(operands.a, operands.weight.t(), one, one, out, c) for c in configs]
    assert precompile_launches(launches, workers=2, log=pytest.fail)
    # The warp-specialised (Gluon) kernel runs on a CUDA device only; on these CPU operands
    # its tiles launch the TMA kernel (ops.launch), so it is not among the CPU's compiles.
    assert {name for name, _, _ in seen} == \
        set(registry.GEMM_KERNELS) - {"fp8_scaled_mm_pingpong_kernel"}, seen
    assert ("fp8_scaled_mm_tma_kernel", (1, 2), 4) in seen


# ------------------------------------------------------------------ the tuner

def _settings(**overrides):
    base = dict(family="default", screen_ms=(1, 64, 256), class_ms=(1, 64, 256),
                block_ns=(64, 128), split_ks=(1, 2, 4), stages=(3, 4), keep=2, budget_s=60,
                check_ms=(1, 7, 33), check_big_m=BIG_M_SMALL, check_subsets=("prefix",),
                check_data=("stress",))
    base.update(overrides)
    return TuneSettings(**base)


def fake_cost(red, var, m, n, k):
    """Prefers split_k 2, BLOCK_N 64, the workspace, 3 stages, 4 warps."""
    t = 10.0 + 0.01 * m + abs(red.split_k - 2) + (0.5 if red.block_n != 64 else 0.0)
    return t - (1.0 if var.use_workspace else 0.0) + 0.1 * var.num_stages + 0.05 * var.num_warps


def _tuner(device, settings=None, **kwargs):
    settings = settings or _settings(check_subsets=subsets_for(device))
    return Tuner(settings, device=device, measure=kwargs.pop("measure", fake_cost),
                 log=lambda line: None, **kwargs)


def test_tuner_stores_the_fastest_reduction_after_it_passes_the_checks(device):
    (outcome,) = _tuner(device).tune([GemmShape("tiny", N, K)])
    assert outcome.status == "tuned" and outcome.chosen == "bn64-bk128-sk2"
    assert outcome.rejected == [] and outcome.comparisons > 0


def test_tuner_m_tiles_follow_the_fastest_variant_per_class(device):
    (outcome,) = _tuner(device).tune([GemmShape("tiny", N, K)])
    tiles = [(t.max_m, t.block_m, t.num_warps, t.num_stages, t.use_workspace)
             for t in outcome.entry.m_tiles]
    assert tiles == [(64, 64, 4, 3, True), (None, 64, 4, 3, False)]


def test_tuner_rejects_an_m_dependent_candidate_and_stores_the_next(device):
    """The fastest candidate is made M-dependent (split_k 1 for m <= 7); the real check must
    reject it before it is stored, listing it with the first differing m."""
    def sabotaging_check(entry, n, k):
        candidate = MDependentSplit(entry, 7) if entry.split_k == 2 else entry
        return check_entry(candidate, n, k, device=device, check_ms=(1, 7, 33),
                           big_m=BIG_M_SMALL, subsets=subsets_for(device), data=("stress",))

    (outcome,) = _tuner(device, check=sabotaging_check).tune([GemmShape("tiny", N, K)])
    assert outcome.status == "tuned" and outcome.entry.split_k != 2
    (rejected,) = outcome.rejected
    assert rejected["reduction"] == "bn64-bk128-sk2"
    assert rejected["first_differing_m"] in (1, 7)
    assert rejected["failure"]["kind"] == "invariance"


def _rejecting(entry, n, k):
    return CheckResult(False, 1, CheckFailure("invariance", 1, "prefix", None, True, "fake",
                                              "stress"))


def test_tuner_keeps_the_base_entry_when_every_candidate_is_rejected(device):
    (outcome,) = _tuner(device, check=_rejecting).tune([GemmShape("tiny", N, K)])
    assert outcome.status == "base" and outcome.entry is None
    # every finalist, then one variant for all M
    assert [r["candidate"] for r in outcome.rejected] == ["tuned", "tuned", "single-variant"]


def test_tuner_budget_truncates_screening_but_still_stores_an_entry(device):
    clock = {"t": 0.0}

    def slow_cost(*args):
        clock["t"] += 1.0
        return fake_cost(*args)

    tuner = _tuner(device, settings=_settings(budget_s=4, check_subsets=subsets_for(device)),
                   measure=slow_cost, clock=lambda: clock["t"])
    (outcome,) = tuner.tune([GemmShape("tiny", N, K)])
    assert outcome.truncated and len(outcome.screened) == 1
    assert outcome.entry is not None


def test_tuner_gives_the_first_shape_a_double_budget_share(device):
    clock = {"t": 0.0}
    shares = []

    class SpendsItsShare(Tuner):
        def tune_shape(self, shape, budget_s):
            shares.append(budget_s)
            clock["t"] += budget_s

    SpendsItsShare(_settings(budget_s=90), device=device, measure=fake_cost,
                   log=lambda line: None, clock=lambda: clock["t"]).tune(
        [GemmShape(f"s{i}", N, K) for i in range(4)])
    assert shares == pytest.approx([36.0, 18.0, 18.0, 18.0])


def test_tuned_policy_loads_and_carries_tuned_on(device, tmp_path):
    settings = _settings(check_subsets=subsets_for(device))
    outcomes = _tuner(device, settings).tune([GemmShape("tiny", N, K)])
    base = shipped_policy("default")
    payload = tuned_policy_json(base, outcomes, settings, tuned_on(), 12.0)
    path = write_tuned_policy(tmp_path / "tuned.json", payload)
    policy = load_policy_file(path)
    assert policy.family == "default" and policy.default == base.default
    assert policy.entry(N, K) == outcomes[0].entry
    raw = json.loads(path.read_text())
    assert {"gpu", "capability", "torch", "triton", "date"} <= set(raw["tuned_on"])
    assert raw["tuning"]["shapes"][0]["status"] == "tuned"


def test_tuned_policy_lists_rejected_candidates(device, tmp_path):
    settings = _settings(check_subsets=subsets_for(device))
    outcomes = _tuner(device, settings, check=_rejecting).tune([GemmShape("tiny", N, K)])
    payload = tuned_policy_json(shipped_policy("default"), outcomes, settings, tuned_on())
    assert len(payload["tuning"]["rejected"]) == 3
    assert payload["tuning"]["rejected"][0]["first_differing_m"] == 1
    assert payload["entries"] == []


def test_write_tuned_policy_refuses_an_unloadable_table(tmp_path):
    with pytest.raises(ValueError):
        write_tuned_policy(tmp_path / "bad.json", {"family": "sm90", "default": {
            "block_n": 64, "block_k": 128, "m_tiles": [{"max_m": 16, "block_m": 64,
                                                        "num_warps": 4, "num_stages": 3}]}})
    assert not (tmp_path / "bad.json").exists()


@pytest.mark.parametrize("overrides", [
    dict(family="sm75"), dict(stages=(1,)), dict(block_ks=(16,)), dict(warps=(3,)),
    dict(check_ms=(1, 200)), dict(keep=0), dict(budget_s=0), dict(check_subsets=("middle",)),
    dict(check_data=("zeros",))],
    ids=["family", "stages", "block-k", "warps", "check-m", "keep", "budget", "subsets",
         "data"])
def test_settings_reject(overrides):
    with pytest.raises(ValueError):
        _settings(**overrides).validate()


# ------------------------------------------------------------------ CLI

def test_cli_defaults_mirror_the_tuner_constants():
    d = _defaults()
    s = TuneSettings(family="sm90")
    assert (d.screen_ms, d.class_ms, d.block_ns, d.block_ks, d.split_ks, d.warps, d.stages,
            d.keep, d.check_ms, d.check_big_m, d.check_data, d.warmup_ms, d.rep_ms,
            d.seed) == \
        (s.screen_ms, s.class_ms, s.block_ns, s.block_ks, s.split_ks, s.warps, s.stages,
         s.keep, s.check_ms, s.check_big_m, s.check_data, s.warmup_ms, s.rep_ms, s.seed)
    assert (CHECK_MS, CHECK_BIG_M, CHECK_DATA) == (s.check_ms, s.check_big_m, s.check_data)


@pytest.mark.parametrize("requested,detected,expected", [("auto", "sm90", "sm90"),
                                                         ("sm90", "sm90", "sm90"),
                                                         ("sm120", "sm90", None)],
                         ids=["auto", "same", "foreign"])
def test_resolve_family(requested, detected, expected):
    if expected is None:
        with pytest.raises(ValueError, match="proven"):
            resolve_family(requested, detected)
    else:
        assert resolve_family(requested, detected) == expected


def test_tune_without_gpu_exits_2_with_a_clear_message(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU path; this machine has a CUDA GPU")
    assert main(["tune", "--shapes", "qwen3-8b", "--out", str(tmp_path / "t.json")]) == 2
    assert "tune needs a CUDA GPU; found none" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


# ------------------------------------------------------------------ GPU

def _gpu_family():
    from det_suite.platform.family import device_family
    return device_family(torch.device("cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(4096, 4096), (4096, 12288)], ids=["o", "down"])
def test_gpu_check_rejects_split_k_chosen_by_m(n, k):
    block_m = FAMILY_BLOCK_M[_gpu_family()][-1]
    entry = TableEntry(n, k, 128, 128, 4, 8, (
        MTile(max_m=None, block_m=block_m, num_warps=8, num_stages=3),))
    result = check_invariance(MDependentSplit(entry, 64), n, k, device="cuda")
    # Rejected, at an m inside the window whose split differs (m <= 64). Which m shows it
    # first is data-dependent: on the H200 a single row of the o projection happened to
    # round identically under both splits and m=7 was the first to differ.
    assert not result.passed and result.first_differing_m <= 64


@pytest.mark.gpu
def test_gpu_check_accepts_a_family_table_with_workspace_and_two_block_m():
    safe = FAMILY_BLOCK_M[_gpu_family()]
    entry = TableEntry(4096, 12288, 128, 128, 4, 8, (
        MTile(max_m=64, block_m=safe[0], num_warps=4, num_stages=4, use_workspace=True),
        MTile(max_m=None, block_m=safe[-1], num_warps=8, num_stages=3)))
    result = check_entry(entry, 4096, 12288, device="cuda")
    assert result.passed, result.failure


@pytest.mark.gpu
@pytest.mark.sm90
def test_gpu_check_rejects_mixing_mma_sync_and_wgmma_tiles_on_sm90():
    """docs/invariance-rule.md: BLOCK_M 16 is mma.sync k16 on Hopper, 128 is wgmma k32; mixing them
    differed by up to 4.0 on the down projection."""
    entry = TableEntry(4096, 12288, 64, 128, 1, 8, (
        MTile(max_m=16, block_m=16, num_warps=4, num_stages=3),
        MTile(max_m=None, block_m=128, num_warps=4, num_stages=3)))
    result = check_invariance(entry, 4096, 12288, device="cuda")
    assert not result.passed and result.first_differing_m == 1


@pytest.mark.gpu
@pytest.mark.perf
def test_gpu_tune_cli_small_shape(tmp_path):
    out = tmp_path / "tuned.json"
    code = main(["tune", "--shapes", "1024,2048", "--out", str(out), "--budget-s", "60",
                 "--screen-m", "1", "128", "--m", "1", "128", "2048", "--keep", "1",
                 "--split-k", "1", "2", "--block-n", "64", "128", "--check-big-m", "1000"])
    assert code == 0
    policy = load_policy_file(out)
    entry = policy.entry(1024, 2048)
    assert entry.n == 1024, "the shape should get a tuned entry"
    assert {t.block_m for t in entry.m_tiles} <= set(FAMILY_BLOCK_M[policy.family])
    raw = json.loads(out.read_text())
    assert raw["tuned_on"]["gpu"] and raw["tuning"]["shapes"][0]["status"] == "tuned"


@pytest.mark.parametrize("family", shipped_families())
def test_entry_json_round_trips_every_shipped_entry(family):
    """tune writes the base table's untouched entries through entry_json: nothing a shipped
    table uses (per-class BLOCK_N/BLOCK_K, swapped operands, PDL) may be dropped."""
    policy = shipped_policy(family)
    raw = {"family": family, "expected_mma": policy.expected_mma,
           "default": entry_json(policy.default),
           "entries": [entry_json(e) for e in policy.entries.values()]}
    again = parse_policy(raw, "round-trip.json")
    assert again.default == policy.default and again.entries == policy.entries


@pytest.mark.parametrize("m,expected", [(1, {16}), (16, {16}), (17, {16, 32}), (32, {16, 32}),
                                        (33, set())], ids=lambda v: str(v))
def test_sm90_small_m_sweeps_swapped_token_tiles(m, expected):
    red = Reduction(128, 128, 1)
    start = representative_variant("sm90", m, red)
    swapped = {v.block_m for v in axis_variants(start, "sm90", m, red) if v.swap_ab}
    assert swapped == expected
    assert all(v.block_m >= 64 for v in axis_variants(start, "sm90", m, red) if not v.swap_ab)


@pytest.mark.parametrize("family", ["sm120", "sm89", "sm100", "default"])
def test_families_without_swapped_kernel_never_sweep_it(family):
    red = Reduction(128, 128, 1)
    start = representative_variant(family, 1, red)
    assert not any(v.swap_ab for v in axis_variants(start, family, 1, red))
    assert not any(v.swap_ab for v in variant_space(family, 1, red))


def test_combining_axes_never_mixes_a_swapped_tile_into_an_unswapped_one():
    red = Reduction(128, 128, 1)
    start = replace(representative_variant("sm90", 8, red), use_tma=True)
    axes = axis_variants(start, "sm90", 8, red)
    timed = {v: (1.0 if v.swap_ab else 5.0) for v in axes}
    combined = combine_axes(start, timed)
    assert not combined.swap_ab and combined.block_m >= 64


def test_swapped_variant_becomes_a_swapped_tile_and_config():
    var = swap_variant(Variant(64, 8, 4), 16)
    assert launch_config(Reduction(128, 128, 1), var).swap_ab
    assert m_tile_json(var.tile(16))["swap_ab"] is True
