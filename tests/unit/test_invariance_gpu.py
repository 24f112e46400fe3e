"""The invariance harness on a GPU: the full matrix, CUDA Graph replay, per-family facts.

Full matrix: the eight shapes (Qwen3-8B qkv/o/gate_up/down, Qwen3-14B qkv/o/gate_up, a
K=80 tail), BF16/FP16, with/without bias, contiguous/strided 3D, two seeds,
calibrated/saturated activations, cached suffixes at every BLOCK_M and power of two +-1 up
to 8192, batch composition, and 2- vs 3-stage A/B on every call. Each invariance assertion
has a positive-control counterpart that must differ under the same comparison.
"""

import pytest

from det_suite.invariance import cases as C
from det_suite.invariance import providers as prov
from det_suite.invariance import runner

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
GPU_SHAPES = C.SHAPE_PRESETS["gpu"]
SMALL_GPU_SHAPES = C.parse_shapes(["4096,4096", "k80-tail"])


def _native() -> str:
    return prov.native_family(DEVICE)


def _run(specs, cases, plan, graph_cases=()):
    providers = prov.resolve(specs, DEVICE).providers
    return runner.run(providers, cases, plan, DEVICE, graph_cases=graph_cases, progress=None)


def _first(mismatches, n=5):
    return "; ".join(f"{c.provider} {c.case} {c.kind} m={c.m} rows={c.mismatching_rows} "
                     f"diff={c.max_abs_diff}" for c in mismatches[:n])


@pytest.fixture(scope="module")
def full_run():
    """det-suite's own family: 2- and 3-stage arms and the table as shipped."""
    native = _native()
    return _run([f"det_suite:{native}:s2", f"det_suite:{native}:s3", f"det_suite:{native}"],
                C.full_matrix(GPU_SHAPES), C.full_plan(graph=False))


def test_full_matrix_counts_meet_the_seeds_evidence(full_run):
    rec = full_run.recorder
    assert rec.count() >= 288
    assert rec.count(kind="pipeline_ab") >= 288
    assert rec.count(kind="suffix") >= 12


def test_full_matrix_det_suite_is_bit_exact(full_run):
    rec = full_run.recorder
    assert not rec.errors, rec.errors[:3]
    assert not rec.mismatches(), _first(rec.mismatches())


def test_positive_control_is_flagged_on_the_gpu():
    result = _run(["control"], C.quick_matrix(SMALL_GPU_SHAPES), C.full_plan(m_full=4097,
                                                                            graph=False))
    kinds = {c.kind for c in result.recorder.mismatches()}
    assert {"suffix", "composition"} <= kinds


@pytest.mark.graph
def test_graph_replay_matches_eager_for_det_suite():
    native = _native()
    result = _run([f"det_suite:{native}:s3", f"det_suite:{native}"], (),
                  C.full_plan(graph=True), graph_cases=C.graph_matrix(GPU_SHAPES))
    rec = result.recorder
    assert result.graph_skipped is None
    assert not rec.errors, rec.errors[:3]  # includes "capture compiled a kernel"
    assert rec.count(kind="graph") >= 2 and not rec.mismatches(), _first(rec.mismatches())


@pytest.mark.graph
def test_graph_replay_detects_the_positive_control():
    plan = C.Plan(m_full=128, suffix_ms=(1,), placements=(), graph_sizes=(4, 128))
    result = _run(["control"], (), plan, graph_cases=C.graph_matrix(SMALL_GPU_SHAPES))
    differing = {(c.m, c.ref_m) for c in result.recorder.mismatches() if c.kind == "graph"}
    assert (5, 128) in differing  # captured at 128 (BLOCK_K 64), eager at 5 (split-K 2)


@pytest.mark.fp8
def test_torch_scaled_mm_is_measured_on_the_full_matrix():
    result = _run(["torch_scaled_mm"], C.full_matrix(GPU_SHAPES), C.full_plan(graph=False))
    assert result.recorder.count() > 0 and not result.recorder.errors, \
        result.recorder.errors[:3]


@pytest.mark.sm90
def test_seed_table_is_not_invariant_on_sm90():
    """docs/invariance-rule.md: on SM90 BLOCK_M 16/32 compile to mma.sync k16 on FP16-converted operands
    and 64/128 to wgmma k32, so the seed's table differs between small and large M."""
    result = _run(["det_suite:sm120"], C.quick_matrix(C.QWEN3_8B), C.full_plan(
        m_full=4097, graph=False))
    differing = [c for c in result.recorder.mismatches() if c.kind == "suffix"]
    assert differing and min(c.m for c in differing) <= 32


@pytest.mark.sm120
def test_seed_table_is_invariant_on_sm12x():
    """On SM12x every BLOCK_M of the seed's table compiles to mma.sync m16n8k32 e4m3."""
    result = _run(["det_suite:sm120:s2", "det_suite:sm120:s3"], C.full_matrix(GPU_SHAPES),
                  C.full_plan(graph=False))
    rec = result.recorder
    assert rec.count(kind="suffix") >= 12 and not rec.errors
    assert not rec.mismatches(), _first(rec.mismatches())


@pytest.mark.sm120
@pytest.mark.graph
def test_seed_table_graph_replay_matches_eager_on_sm12x():
    result = _run(["det_suite:sm120"], (), C.full_plan(graph=True),
                  graph_cases=C.graph_matrix(GPU_SHAPES))
    rec = result.recorder
    assert rec.count(kind="graph") >= 2 and not rec.errors
    assert not rec.mismatches(), _first(rec.mismatches())
