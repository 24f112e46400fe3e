"""The invariance harness: row-count sets, the matrix, inputs, comparisons, verdicts; and
the same comparisons proving one tile-table entry (what `det-suite tune` stores entries by).

Every invariance assertion has a counterpart showing the same comparison detects a
difference: det-suite's kernel vs the positive control (BLOCK_K/split-K chosen by M) on the
CPU interpreter, and fast pure-torch providers for the harness logic.
"""

from dataclasses import replace

import pytest
import torch

from det_suite.invariance import cases as C
from det_suite.platform import gpu_faithful_interpreter as interpreter
from det_suite.invariance import graph, runner, verdict
from det_suite.invariance import providers as prov
from det_suite.invariance.compare import (Recorder, SplitKByM, compare, diff_stats,
                                          prove_entry, run_gemm, subset_rows)
from det_suite.ops import quantize_fp8
from det_suite.policy import LaunchConfig, MTile, TableEntry

DEVICE = "cpu"
NATIVE = prov.native_family(DEVICE)
SMALL = C.Shape("n64k80-tail", 64, 80)
WIDE = C.Shape("n96k256", 96, 256)


# ---------------------------------------------------------------- pure-torch providers

def _q(x, input_scale):
    return (x.float() / input_scale).clamp(-448, 448).to(torch.float8_e4m3fn).float()


def _rowwise(x, w, ws, xs, bias, halves: bool):
    """FP8 linear one row per call; `halves` sums K in two halves (a split-K of 2)."""
    k = x.shape[-1]
    q, wf = _q(x.reshape(-1, k), xs), w.float()
    rows = []
    for i in range(q.shape[0]):
        r = q[i:i + 1]
        if halves:
            h = k // 2
            rows.append(r[:, :h] @ wf[:, :h].t() + r[:, h:] @ wf[:, h:].t())
        else:
            rows.append(r @ wf.t())
    y = torch.cat(rows) * (xs * ws)
    y = y + bias.float() if bias is not None else y
    return y.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])


def invariant_fn(x, w, ws, xs, bias):
    return _rowwise(x, w, ws, xs, bias, halves=False)


def m_dependent_fn(x, w, ws, xs, bias):
    """Split-K of 2 for calls of more than 32 rows: the reduction schedule follows M."""
    return _rowwise(x, w, ws, xs, bias, halves=x.reshape(-1, x.shape[-1]).shape[0] > 32)


def failing_fn(x, w, ws, xs, bias):
    raise RuntimeError("provider exploded")


def fake(name, fn, *, claims=True, control=False, group=None, stages=None):
    return prov.Provider(name, fn, name, claims_invariance=claims, expect_variant=control,
                         ab_group=group, num_stages=stages)


TINY_PLAN = C.Plan(m_full=40, suffix_ms=(1, 16, 17, 32, 33, 40), placements=(8, 40))


def run_fakes(providers, shape=SMALL, plan=TINY_PLAN, case_kw=None):
    case = C.Case(shape, **(case_kw or dict(dtype="bf16", bias=False, layout="contiguous",
                                            seed=0, activation="calibrated")))
    return runner.run(providers, [case], plan, DEVICE, progress=None)


# ---------------------------------------------------------------- row-count sets

@pytest.mark.parametrize("max_m", [130, 8192], ids=["quick-130", "full-8192"])
def test_boundary_set_brackets_every_block_m_and_power_of_two(max_m):
    ms = set(C.boundary_ms(max_m))
    centres = [c for c in (16, 32, 64, 128) + tuple(1 << e for e in range(14)) if c < max_m]
    assert all({c - 1, c, c + 1} - {0} <= ms for c in centres)
    assert max_m in ms and min(ms) == 1 and max(ms) == max_m


@pytest.mark.parametrize("m,cls", [(1, "1-16"), (16, "1-16"), (17, "17-32"), (33, "33-64"),
                                   (128, "65-128"), (129, "129-1024"), (8192, ">1024")])
def test_m_class(m, cls):
    assert C.m_class(m) == cls


def test_plan_rejects_suffix_longer_than_reference_call():
    with pytest.raises(ValueError, match="outside"):
        C.Plan(m_full=10, suffix_ms=(11,), placements=())


# ---------------------------------------------------------------- the matrix

def test_full_matrix_crosses_shape_dtype_seed_bias_and_balances_layout_activation():
    cases = C.full_matrix(C.SHAPE_PRESETS["gpu"])
    shapes = len(C.SHAPE_PRESETS["gpu"])
    assert len(cases) == shapes * 2 * 2 * 2 and len({c.id for c in cases}) == len(cases)
    for shape in C.SHAPE_PRESETS["gpu"]:
        for dtype in ("bf16", "fp16"):
            combos = {(c.layout, c.activation) for c in cases
                      if c.shape == shape and c.dtype == dtype}
            assert combos == {(l, a) for l in C.LAYOUTS for a in C.ACTIVATIONS}


def test_gpu_shapes_cover_every_named_table_entry_and_a_k80_tail():
    """The full matrix proves every (N, K) entry a shipped table names, so no entry ships
    unproved (the 5120x17408 entry once was in no case list)."""
    from det_suite.policy import shipped_families, shipped_policy

    shapes = {(s.n, s.k) for s in C.parse_shapes(["gpu"])}
    named = {(e.n, e.k) for f in shipped_families() for e in shipped_policy(f).all_entries()
             if e.n is not None}
    assert named and named <= shapes
    assert any(k == 80 for _, k in shapes)


def test_quick_matrix_meets_every_axis_value_on_every_shape():
    cases = C.quick_matrix(C.CPU_SHAPES)
    for shape in C.CPU_SHAPES:
        mine = [c for c in cases if c.shape == shape]
        for axis, values in (("dtype", C.DTYPES), ("bias", (False, True)),
                             ("layout", C.LAYOUTS), ("activation", C.ACTIVATIONS)):
            assert {getattr(c, axis) for c in mine} == set(values)


@pytest.mark.parametrize("spec,expected", [("64,80", (64, 80)), ("96x256", (96, 256))])
def test_parse_shapes_accepts_n_k(spec, expected):
    (shape,) = C.parse_shapes([spec])
    assert (shape.n, shape.k) == expected


@pytest.mark.parametrize("spec", ["qwen3-9b", "64", "0,80", "a,b"])
def test_parse_shapes_rejects(spec):
    with pytest.raises(ValueError):
        C.parse_shapes([spec])


# ---------------------------------------------------------------- inputs

@pytest.mark.parametrize("activation", C.ACTIVATIONS)
def test_pairs_cancel_exactly_and_sit_at_or_beyond_fp8_range(activation):
    case = C.Case(WIDE, "bf16", False, "contiguous", 0, activation)
    problem = C.make_problem(case, DEVICE)
    x = C.make_rows(problem, case, 32, "t", DEVICE)
    first, second = x[:, problem.first], x[:, problem.second]
    assert torch.equal(first, -second)
    assert torch.equal(problem.weight[:, problem.first].float(),
                       problem.weight[:, problem.second].float())
    limit = 448.0 * float(problem.input_scale)
    if activation == "calibrated":
        assert x.float().abs().max() == limit
    else:
        assert (x.float().abs() > limit).any()
        q = quantize_fp8(x, problem.input_scale).float()
        assert q.abs().max() == 448.0 and torch.equal(q[:, problem.first],
                                                      -q[:, problem.second])


def test_rows_are_reproducible_per_stream_and_differ_across_streams():
    case = C.Case(SMALL, "fp16", True, "contiguous", 1, "calibrated")
    problem = C.make_problem(case, DEVICE)
    a = C.make_rows(problem, case, 4, "s", DEVICE)
    assert torch.equal(a, C.make_rows(problem, case, 4, "s", DEVICE))
    assert not torch.equal(a, C.make_rows(problem, case, 4, "other", DEVICE))


def test_strided3d_layout_is_a_padded_view_with_nan_padding():
    x2d = torch.randn(5, 80).to(torch.bfloat16)
    x = C.apply_layout(x2d, "strided3d")
    assert x.shape == (1, 5, 80) and x.stride(-2) == 80 + C.STRIDED_PAD
    assert not x.is_contiguous() and torch.equal(x[0], x2d)
    assert torch.isnan(x.as_strided((1, 5, 80 + C.STRIDED_PAD), x.stride())[..., 80:]).all()
    assert C.take_rows(x, 3, 5).stride() == x.stride()


@pytest.mark.parametrize("shape", [SMALL, WIDE], ids=["k80", "k256"])
def test_inputs_expose_a_regrouped_k_sum(shape):
    """The inputs are the harness's detector: BLOCK_K 32 vs 64 grouping of the same
    ordered sum differs on most rows (on plain Gaussian rows it almost never does)."""
    case = C.Case(shape, "bf16", False, "contiguous", 0, "calibrated")
    problem = C.make_problem(case, DEVICE)
    q = _q(C.make_rows(problem, case, 32, "t", DEVICE), problem.input_scale)
    w = problem.weight.float()

    def grouped(block):
        acc = torch.zeros(q.shape[0], w.shape[0])
        for k0 in range(0, shape.k, block):
            acc = acc + q[:, k0:k0 + block] @ w[:, k0:k0 + block].t()
        return (acc * problem.input_scale * problem.weight_scale).to(torch.bfloat16)
    differing_rows = (grouped(32) != grouped(64)).any(dim=1).sum().item()
    assert differing_rows >= q.shape[0] // 2


@pytest.mark.parametrize("data", C.OPERAND_DATA)
def test_gemm_operands_are_fp8_without_zeros(data):
    ops = C.gemm_operands(WIDE.n, WIDE.k, 8, data=data, device=DEVICE, seed=3)
    assert ops.a.dtype == ops.weight.dtype == torch.float8_e4m3fn and ops.data == data
    assert (ops.rows, ops.n, ops.k) == (8, WIDE.n, WIDE.k)
    assert not (ops.a.float() == 0).any() and not (ops.weight.float() == 0).any()


def test_gemm_stress_operands_cancel_exactly():
    """The sharp profile's pairs: weight columns at the FP8 range, activations +-A, so the
    pair products sum to exactly zero and the product is that of the background alone."""
    ops = C.gemm_operands(WIDE.n, WIDE.k, 8, data="stress", device=DEVICE, seed=3)
    a, w = ops.a.double(), ops.weight.double()
    pairs = w.abs().eq(448).all(dim=0)  # the cancelling columns
    assert int(pairs.sum()) == 2 * min(C.SHARP_PAIRS, WIDE.k // 2)
    assert torch.equal(a[:, pairs].abs().amax(dim=0) >= 64, torch.ones(int(pairs.sum()),
                                                                       dtype=torch.bool))
    assert torch.equal(a @ w.t(), a[:, ~pairs] @ w[:, ~pairs].t())


def test_unknown_operand_data_and_profile_are_refused():
    with pytest.raises(ValueError, match="data"):
        C.gemm_operands(64, 80, 4, data="zeros", device=DEVICE)
    with pytest.raises(ValueError, match="profile"):
        C.stress_operands(64, 80, 4, device=DEVICE, profile="blunt")


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("other", [dict(split_k=2), dict(block_k=64)], ids=["split2", "bk64"])
def test_sharp_stress_data_show_a_regrouped_sum_in_every_row(seed, other):
    """The prover's detector, on the kernel itself: split_k 1 vs 2 (two BLOCK_K 128 tiles
    per chunk) and BLOCK_K 128 vs 64 differ in every one of 20 single rows."""
    ops = C.gemm_operands(64, 512, 20, data="stress", device=DEVICE, seed=seed)
    base = LaunchConfig(block_m=32, block_n=64, block_k=128, num_warps=4, num_stages=3,
                        split_k=1, group_m=8)

    def run(config):
        return run_gemm(ops.a, ops.weight.t(), ops.a_scale, ops.weight_scale, config)
    assert bool((run(base) != run(replace(base, **other))).any(dim=1).all())


# ---------------------------------------------------------------- one comparison

def test_compare_records_equal():
    rec = Recorder()
    case = C.Case(SMALL, "bf16", False, "contiguous", 0, "calibrated")
    t = torch.ones(3, 4)
    c = compare(rec, provider="p", case=case, kind="suffix", test=t, ref=t.clone(), m=3,
                ref_m=9)
    assert c.equal and rec.count() == 1


def test_compare_records_rows_and_max_diff_of_a_difference():
    rec = Recorder()
    case = C.Case(SMALL, "bf16", False, "contiguous", 0, "calibrated")
    ref = torch.zeros(4, 3)
    test = ref.clone()
    test[1, 2], test[3, 0] = 0.5, -2.0
    c = compare(rec, provider="p", case=case, kind="suffix", test=test, ref=ref, m=4, ref_m=9)
    assert (c.equal, c.mismatching_rows, c.max_abs_diff) == (False, 2, 2.0)


def test_compare_shape_mismatch_is_a_difference_not_a_crash():
    rec = Recorder()
    case = C.Case(SMALL, "bf16", False, "contiguous", 0, "calibrated")
    c = compare(rec, provider="p", case=case, kind="suffix", test=torch.zeros(2, 3),
                ref=torch.zeros(3, 3), m=2, ref_m=3)
    assert not c.equal and "shape" in c.detail


def test_diff_stats_counts_one_sided_nan_as_infinite():
    rows, diff = diff_stats(torch.tensor([[float("nan"), 1.0]]), torch.tensor([[0.0, 1.0]]))
    assert rows == 1 and diff == float("inf")


# ---------------------------------------------------------------- harness, pure torch

def test_invariant_provider_passes_every_suffix_and_composition_comparison():
    result = run_fakes([fake("inv", invariant_fn)])
    rec = result.recorder
    assert rec.count(kind="suffix") == len(TINY_PLAN.suffix_ms)
    assert rec.count(kind="composition") == len(TINY_PLAN.placements)
    assert not rec.mismatches() and not rec.errors


def test_m_dependent_provider_is_caught_by_suffix_comparisons():
    rec = run_fakes([fake("var", m_dependent_fn)]).recorder
    differing = sorted(c.m for c in rec.mismatches() if c.kind == "suffix")
    # The 40-row reference call splits K; suffixes of <= 32 rows do not.
    assert differing and max(differing) <= 32


def test_m_dependent_provider_is_caught_by_composition_comparisons():
    rec = run_fakes([fake("var", m_dependent_fn)]).recorder
    assert [c.m for c in rec.mismatches() if c.kind == "composition"] == [40]


def test_identical_ab_arms_agree_on_every_call():
    arms = [fake("a", invariant_fn, group="g", stages=2), fake("b", invariant_fn, group="g",
                                                                stages=3)]
    rec = run_fakes(arms).recorder
    calls = 1 + len(TINY_PLAN.suffix_ms) + 1 + len(TINY_PLAN.placements)
    assert rec.count(provider="b", kind="pipeline_ab") == calls and not rec.mismatches()


def test_ab_arms_with_different_schedules_are_caught():
    arms = [fake("a", invariant_fn, group="g", stages=2),
            fake("b", m_dependent_fn, group="g", stages=3)]
    rec = run_fakes(arms).recorder
    assert any(c.kind == "pipeline_ab" and c.provider == "b" for c in rec.mismatches())


def test_provider_failure_is_recorded_and_other_providers_still_run():
    result = run_fakes([fake("boom", failing_fn), fake("inv", invariant_fn)])
    assert [e.provider for e in result.recorder.errors] == ["boom"]
    assert result.recorder.count(provider="inv") > 0


# ---------------------------------------------------------------- verdicts

def _verdict(provider, rec):
    (v,) = verdict.verdicts([provider], rec)
    return v


@pytest.mark.parametrize("fn,claims,control,ok", [
    pytest.param(invariant_fn, True, False, True, id="claimed-and-invariant-passes"),
    pytest.param(m_dependent_fn, True, False, False, id="claimed-but-variant-fails"),
    pytest.param(m_dependent_fn, False, False, True, id="measured-variant-reported-only"),
    pytest.param(m_dependent_fn, False, True, True, id="control-flagged-passes"),
    pytest.param(invariant_fn, False, True, False, id="control-not-flagged-fails"),
    pytest.param(failing_fn, True, False, False, id="claimed-but-failing-fails"),
])
def test_verdict(fn, claims, control, ok):
    p = fake("p", fn, claims=claims, control=control)
    v = _verdict(p, run_fakes([p]).recorder)
    assert v.ok is ok and verdict.exit_code([v]) == (0 if ok else 1)


def test_blind_control_message_says_schedule_change_undetectable():
    p = fake("p", invariant_fn, claims=False, control=True)
    assert "could not detect a schedule change" in _verdict(p, run_fakes([p]).recorder).message


def test_claim_with_nothing_compared_fails():
    v = _verdict(fake("p", invariant_fn), Recorder())
    assert not v.ok and "nothing was compared" in v.message


def test_control_with_nothing_compared_is_not_flagged():
    # A control that compared nothing proves nothing: the run's claims cannot be trusted.
    v = _verdict(fake("p", m_dependent_fn, claims=False, control=True), Recorder())
    assert not v.ok and v.status == "CONTROL NOT FLAGGED"
    assert verdict.exit_code([v]) == 1


# ---------------------------------------------------------------- det-suite's kernel

QUICK = C.Plan(m_full=130, suffix_ms=(1, 2, 15, 16, 17, 31, 32, 33, 64, 65, 128, 129, 130),
               placements=(17, 33, 130))
KERNEL_CASES = [
    pytest.param(C.Case(SMALL, "bf16", False, "contiguous", 0, "calibrated"), id="k80-bf16"),
    pytest.param(C.Case(WIDE, "fp16", True, "strided3d", 1, "saturated"),
                 id="k256-fp16-bias-strided3d-saturated"),
]


@pytest.mark.parametrize("case", KERNEL_CASES)
def test_det_suite_native_table_is_invariant_and_its_ab_arms_agree(case):
    arms = prov.resolve([f"det_suite:{NATIVE}:s2", f"det_suite:{NATIVE}:s3"], DEVICE).providers
    rec = runner.run(arms, [case], QUICK, DEVICE, progress=None).recorder
    assert rec.count(kind="suffix") == 2 * len(QUICK.suffix_ms)
    assert rec.count(kind="pipeline_ab") == 1 + len(QUICK.suffix_ms) + 1 + len(QUICK.placements)
    assert not rec.mismatches() and not rec.errors


@pytest.mark.parametrize("case", KERNEL_CASES)
def test_positive_control_is_flagged_on_the_same_cases(case):
    control = prov.resolve(["control"], DEVICE).providers
    rec = runner.run(control, [case], QUICK, DEVICE, progress=None).recorder
    differing = {c.kind for c in rec.mismatches()}
    assert differing == {"suffix", "composition"}
    assert min(c.m for c in rec.mismatches() if c.kind == "suffix") == 1


# ---------------------------------------------------------------- one entry (the tuner's)

def test_subset_rows_name_the_first_or_last_m_rows():
    assert subset_rows("prefix", 3, 10) == (0, 3) and subset_rows("suffix", 3, 10) == (7, 10)
    with pytest.raises(ValueError):
        subset_rows("middle", 3, 10)
    with pytest.raises(ValueError):
        subset_rows("suffix", 11, 10)


def _fixed_entry():
    """Split-K 2 by the workspace for small M, in one pass above; one BLOCK_M."""
    return TableEntry(64, 512, 64, 128, 2, 8, (
        MTile(max_m=16, block_m=32, num_warps=4, num_stages=3, use_workspace=True),
        MTile(max_m=None, block_m=32, num_warps=4, num_stages=3)))


def test_prove_entry_passes_a_fixed_schedule_and_records_every_comparison():
    ops = C.gemm_operands(64, 512, 40, data="stress", device=DEVICE)
    rec = Recorder()
    result = prove_entry(_fixed_entry(), ops, check_ms=(1, 7, 33), stages=(2,),
                         subsets=("prefix", "suffix"), recorder=rec)
    assert result.passed and result.comparisons == rec.count() > 0
    assert {c.kind for c in rec.comparisons} == {"repeat", "prefix", "suffix", "all"}
    assert not rec.mismatches() and not rec.errors


def test_prove_entry_rejects_the_split_k_counterpart_at_the_first_row_count():
    """Counterpart of the test above: the same entry made to choose split-K by M."""
    ops = C.gemm_operands(64, 512, 40, data="stress", device=DEVICE)
    result = prove_entry(SplitKByM(_fixed_entry(), 7), ops, check_ms=(1, 7, 33),
                         subsets=("prefix",))
    assert not result.passed and result.failure.kind == "invariance"
    assert result.first_differing_m == 1 and result.failure.selected
    assert result.failure.config["split_k"] == 1 and result.failure.data == "stress"


def test_cpu_runs_are_gpu_faithful_and_say_so():
    from triton.runtime.interpreter import InterpreterBuilder
    plan = C.Plan(m_full=8, suffix_ms=(1,), placements=(), graph_sizes=())
    case = C.Case(SMALL, "bf16", False, "contiguous", 0, "calibrated")
    result = runner.run([fake("inv", invariant_fn)], [case], plan, DEVICE, progress=None)
    assert InterpreterBuilder.create_dot.__module__ == interpreter.__name__
    assert interpreter.NOTE in result.notes


# ---------------------------------------------------------------- CUDA Graph (graph-free)

def test_graph_replay_is_skipped_on_cpu_with_a_reason():
    plan = C.Plan(m_full=8, suffix_ms=(1,), placements=(), graph_sizes=(1, 2, 4))
    case = C.Case(SMALL, "bf16", False, "contiguous", 0, "calibrated")
    lines = []
    result = runner.run([fake("inv", invariant_fn)], [case], plan, DEVICE, graph_cases=[case],
                        progress=lines.append)
    assert "CUDA device" in result.graph_skipped and result.recorder.count(kind="graph") == 0
    assert any("skipped" in line for line in lines)


def test_padded_row_counts_replay_full_and_smallest_padded_batch():
    assert graph.padded_row_counts((1, 2, 4, 128, 256)) == [
        (1, (1,)), (2, (2,)), (4, (3, 4)), (128, (5, 128)), (256, (129, 256))]


def test_compile_watch_sees_compiles_and_restores_previous_hook():
    from triton import knobs
    calls = []
    knobs.runtime.jit_post_compile_hook = lambda **kw: calls.append(kw["repr"])
    try:
        with graph.CompileWatch() as watch:
            knobs.runtime.jit_post_compile_hook(repr="kernel[...]")
        assert watch.active and watch.compiled == ["kernel[...]"] and calls == ["kernel[...]"]
        assert knobs.runtime.jit_post_compile_hook is not None
        knobs.runtime.jit_post_compile_hook(repr="after")
        assert watch.compiled == ["kernel[...]"]
    finally:
        knobs.runtime.jit_post_compile_hook = None
