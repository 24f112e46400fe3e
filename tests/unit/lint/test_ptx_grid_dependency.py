"""A PDL launch waits for the previous grid before it touches global memory (PTX rule).

The interpreter runs grids one after another and cannot execute `griddepcontrol`, so the
CPU cannot show the race a missing wait causes; the cross-compiled PTX shows the wait's
place, for every target. The GPU chain test (test_fp8_linear.py) shows the race itself.
"""

from dataclasses import replace

import pytest

from det_suite import lint
from det_suite.lint.ptx_grid_dependency import (GridDependencyOrder, global_access,
                                                grid_dependency_order)
from det_suite.policy import shipped_policy

WAITS_FIRST = """
$L__tmp0:
    // begin inline asm
    griddepcontrol.wait; // dummy %r13
    // end inline asm
    griddepcontrol.launch_dependents; // dummy %r14
    ld.param.u64 %rd1, [kernel_param_0];
    @%p1 ld.global.b32 { %r97 }, [ %rd26 + 0 ];
    cp.async.cg.shared.global [ %r24 + 0 ], [ %rd86 + 0 ], 0x10, %r25;
"""
LOAD_BEFORE_WAIT = """
    ld.param.u64 %rd1, [kernel_param_0];
$L__tmp0:
    ld.global.b32 %r1, [%rd1];
    griddepcontrol.wait;
"""
NO_WAIT = """
    griddepcontrol.launch_dependents;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2, {%r3, %r4}], [%r5];
"""


@pytest.mark.parametrize("ptx,waits_first", [
    pytest.param(WAITS_FIRST, True, id="wait-then-loads"),
    pytest.param(LOAD_BEFORE_WAIT, False, id="global-load-before-wait"),
    pytest.param(NO_WAIT, False, id="tma-copy-and-no-wait"),
])
def test_wait_position_is_read_from_the_listing(ptx, waits_first):
    assert grid_dependency_order(ptx).waits_first is waits_first


@pytest.mark.parametrize("statement,is_global", [
    ("ld.global.b32 %r1, [%rd1]", True),
    ("@!%p3 st.global.v4.b32 [ %rd9 + 0 ], { %r1, %r2, %r3, %r4 }", True),
    ("atom.global.gpu.acq_rel.add.u32 %r1, [%rd2], 1", True),
    ("ld.u32 %r1, [%rd1]", True),  # generic space: may be global
    ("cp.async.cg.shared.global [ %r24 + 0 ], [ %rd86 + 0 ], 0x10, %r25", True),
    ("ld.param.u64 %rd1, [kernel_param_0]", False),
    ("ld.shared.b32 %r1, [%r2]", False),
    ("st.shared.v2.b32 [%r1], {%r2, %r3}", False),
    ("cp.async.commit_group", False),
    ("cp.async.bulk.wait_group.read 0", False),
])
def test_global_accesses_are_told_from_shared_param_and_bookkeeping(statement, is_global):
    assert (global_access(statement) is not None) is is_global


@pytest.fixture(scope="module")
def sm90_pdl_variants():
    result = lint.lint_shipped(["sm90"], arches=[90])
    return [v for table in result.tables for entry in table.entries for v in entry.variants
            if v.pdl]


def test_shipped_sm90_table_has_pdl_variants_to_check(sm90_pdl_variants):
    kernels = {v.kernel for v in sm90_pdl_variants}
    assert any(v.swap_ab for v in sm90_pdl_variants if v.kernel == "fp8_scaled_mm_tma_kernel")
    assert "fp8_scaled_mm_kernel" in kernels  # the pointer fallback of a PDL tile


def test_every_shipped_pdl_variant_waits_before_touching_memory(sm90_pdl_variants):
    print(f"{len(sm90_pdl_variants)} PDL variants checked")
    assert {v.pdl_order for v in sm90_pdl_variants} == {
        "griddepcontrol.wait before every global access"}


@pytest.mark.parametrize("use_tma,swap_ab", [(False, False), (True, False), (True, True)],
                         ids=["pointer", "tma", "swapped"])
def test_the_rule_flags_a_pdl_launch_of_a_kernel_compiled_without_the_wait(use_tma, swap_ab):
    """Counterpart on real PTX: a kernel compiled with USE_PDL off (no wait) but launched
    with PDL is what the rule exists to catch."""
    config = replace(shipped_policy("sm90").select(8, 4096, 4096), use_tma=use_tma,
                     swap_ab=swap_ab, block_m=16 if swap_ab else 64, use_pdl=False)
    case = lint.GemmCase(config, 8, 4096, 4096)
    launch = lint.gemm_launches(case, pointer_fallback=False)[0]
    call, bound = launch.calls[0]
    bound.options["launch_pdl"] = True  # the launch attribute without the kernel's wait
    job = lint.specialize(bound, call.module, call.kernel, 90)
    (outcome,) = lint.compile_outcomes([job], workers=1)
    assert outcome.ok, outcome.error
    order = GridDependencyOrder(**outcome.grid_dependency)
    assert not order.waits_first and "no griddepcontrol.wait" in order.describe()


PREFETCH_THEN_WAIT = """
    ld.param.u64 %rd1, [kernel_param_0];
    prefetch.global.L2 [%rd11];
    @%p2 prefetch.global.L2 [%rd12];
    griddepcontrol.wait; // dummy %r71
    prefetch.global.L2 [%rd13];
    ld.global.b32 %r1, [%rd1];
"""


def test_an_l2_prefetch_before_the_wait_is_counted_not_an_access():
    """prefetch.global.L2 fills the GPU-coherent L2 and no register: it cannot see a value
    the previous grid has yet to write. Only the ones before the wait are counted."""
    order = grid_dependency_order(PREFETCH_THEN_WAIT)
    assert order.waits_first and order.l2_prefetches_before_wait == 2
    assert order.describe().endswith("after 2 L2 prefetch statements")
    assert global_access("prefetch.global.L2 [%rd11]") is None


def _weight_prefetch_outcome(prefetch_k: int):
    config = replace(shipped_policy("sm90").select(1, 6144, 4096), use_pdl=True,
                     prefetch_k=prefetch_k)
    assert config.swap_ab and config.use_tma
    case = lint.GemmCase(config, 1, 6144, 4096)
    call, bound = lint.gemm_launches(case, pointer_fallback=False)[0].calls[0]
    (outcome,) = lint.compile_outcomes([lint.specialize(bound, call.module, call.kernel, 90)],
                                       workers=1)
    assert outcome.ok, outcome.error
    return GridDependencyOrder(**outcome.grid_dependency)


@pytest.mark.parametrize("prefetch_k,prefetches", [(0, False), (1024, True), (4096, True)],
                         ids=["off", "quarter-of-k", "whole-k"])
def test_a_tile_with_prefetch_k_fetches_its_weight_before_the_wait(prefetch_k, prefetches):
    """Cross-compiled for sm_90: the swapped decode kernel asks L2 for its weight rows
    before griddepcontrol.wait exactly when its tile sets prefetch_k, and still reads
    nothing before the wait."""
    order = _weight_prefetch_outcome(prefetch_k)
    assert order.waits_first, order.describe()
    assert (order.l2_prefetches_before_wait > 0) is prefetches


def _policy_with_prefetch(prefetch_k: int):
    policy = shipped_policy("sm90")
    entry = policy.entry(6144, 4096)
    assert entry.m_tiles[0].use_pdl
    tile = replace(entry.m_tiles[0], prefetch_k=prefetch_k)
    entry = replace(entry, m_tiles=(tile, *entry.m_tiles[1:]))
    return replace(policy, entries={(6144, 4096): entry})


def _entry_result(policy):
    result = lint.lint_table(policy, arches=[90], override_stages=(), include_fixed=False)
    (table,) = result.tables
    return next(e for e in table.entries if e.key == "6144x4096")


def test_the_lint_passes_a_prefetch_k_tile_and_labels_it():
    entry = _entry_result(_policy_with_prefetch(2048))
    assert entry.status == "ok", entry.message
    assert any("L2 prefetch 2048" in v.label for v in entry.variants)


def test_the_lint_flags_a_prefetch_k_tile_whose_ptx_fetches_nothing(monkeypatch):
    """Counterpart: PTX that issues no prefetch before the wait (as if the kernel ignored
    PREFETCH_K) while the tile asks for one is a violation the lint names."""
    from det_suite.lint import rules

    real = rules.GridDependencyOrder
    monkeypatch.setattr(rules, "GridDependencyOrder",
                        lambda **fields: real(**{**fields, "l2_prefetches_before_wait": 0}))
    entry = _entry_result(_policy_with_prefetch(2048))
    assert entry.status == "violation"
    assert "sets prefetch_k but its PTX issues no prefetch.global.L2" in entry.message
