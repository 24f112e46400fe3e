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
    assert "fp8_scaled_mm_swap_ab_kernel" in kernels
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
