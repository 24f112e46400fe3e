"""`det-suite lint-policy`: shipped tables compile to one MMA instruction along K per entry,
the seed's table does not on SM90, every kernel variant a table can select (TMA or pointer
loads, fused fix-up, separate reduce, single pass) is compiled, the lint compiles exactly
what `ops.launch_fp8_gemm` launches, and nothing is skipped silently.

Compiles run in worker subprocesses without TRITON_INTERPRET, so these tests work in the
CPU suite, which sets TRITON_INTERPRET=1. The shipped lint is computed once per module.
"""

import inspect
import json
from dataclasses import replace

import pytest
import torch

from det_suite import lint, ops
from det_suite.cli import main as cli_main
from det_suite.kernels import registry
from det_suite.lint import (
    FAMILY_TARGETS,
    GemmCase,
    KernelLaunch,
    family_targets,
    gemm_launches,
    specialize,
    worker,
)
from det_suite.ops import bi_launch_spec
from det_suite.platform.family import family_of_capability
from det_suite.policy import LaunchConfig, shipped_families, shipped_policy


def _seed_table_path():
    """The seed's tile table (BLOCK_M 16/32/128 by M), shipped as the sm120 table."""
    from importlib import resources
    return str(resources.files("det_suite.policy").joinpath("tables", "sm120.json"))


@pytest.fixture(scope="session")
def compile_lock(tmp_path_factory):
    """One lint compiling at a time across xdist workers: the machine's cores are already
    busy with one lint's compile workers, and whoever comes second finds the kernels in
    Triton's disk cache instead of compiling them again alongside."""
    try:
        from filelock import FileLock
    except ImportError:  # pragma: no cover - filelock comes with torch
        import contextlib
        return contextlib.nullcontext()
    return FileLock(str(tmp_path_factory.getbasetemp().parent / "det-suite-policy-lint.lock"))


@pytest.fixture(scope="module")
def shipped(compile_lock):
    with compile_lock:
        return lint.lint_shipped()


@pytest.fixture(scope="module")
def seed_on_sm90(compile_lock):
    with compile_lock:
        return lint.lint_table(_seed_table_path(), ["sm_90"])


def _table(result, family, arch):
    matches = [t for t in result.tables if t.family == family and t.arch == arch]
    assert len(matches) == 1, f"{family} on {arch}: {len(matches)} results"
    return matches[0]


SHIPPED_PAIRS = [(family, cap) for family in shipped_families()
                 for cap, _role in family_targets(family)]


# ------------------------------------------------------------------ shipped tables

def test_shipped_tables_have_no_violations(shipped):
    assert shipped.violations == []


@pytest.mark.parametrize("family, capability", SHIPPED_PAIRS,
                         ids=[f"{f}-sm_{c}" for f, c in SHIPPED_PAIRS])
def test_shipped_table_is_linted_on_each_target(shipped, family, capability):
    table = _table(shipped, family, f"sm_{capability}")
    assert [e.key for e in table.entries] == [e.key for e in shipped_policy(family).all_entries()]


@pytest.mark.parametrize("family, capability",
                         [p for p in SHIPPED_PAIRS if p != ("default", 80)],
                         ids=[f"{f}-sm_{c}" for f, c in SHIPPED_PAIRS if (f, c) != ("default", 80)])
def test_shipped_entry_variants_share_one_signature(shipped, family, capability):
    table = _table(shipped, family, f"sm_{capability}")
    for entry in table.entries:
        signatures = {tuple(i["signature"]) for v in entry.variants for i in v.instructions}
        assert entry.status == "ok" and len(signatures) == 1, (entry.key, signatures)


def test_default_table_on_pre_fp8_target_is_reported_unsupported(shipped):
    table = _table(shipped, "default", "sm_80")
    assert [e.status for e in table.entries] == ["unsupported"]
    assert any("sm_80 (default table)" in w for w in shipped.warnings)


@pytest.mark.parametrize("family", ["sm89", "sm90", "sm100", "sm120", "default"])
def test_every_tile_and_pipeline_depth_is_compiled(shipped, family):
    policy = shipped_policy(family)
    capability = family_targets(family)[-1][0]
    table = _table(shipped, family, f"sm_{capability}")
    for entry, result in zip(policy.all_entries(), table.entries):
        compiled = {(v.tile, v.block_m, v.block_n, v.num_warps, v.num_stages, v.kernel,
                     v.swap_ab, v.fixup) for v in result.variants
                    if v.launch == "selected" and v.k % 16 == 0}
        wanted = {(i, c.block_m, c.block_n, c.num_warps, s, kernel, swap_ab, fixup)
                  for i, c in enumerate(entry.variants()) for s in {c.num_stages, 2, 3}
                  for kernel, swap_ab, fixup in _selected_kernels(c)}
        assert compiled == wanted, entry.key


def _selected_kernels(config):
    """(kernel, SWAP_AB, fix-up) a tile launches on TMA-compatible operands (K % 16 == 0)."""
    fixup = ("fused" if config.fused_fixup else "reduce") if config.use_workspace else ""
    gemm = "fp8_scaled_mm_tma_kernel" if config.use_tma else "fp8_scaled_mm_kernel"
    if config.warp_specialized:    # its own kernel (SM90, Gluon); the TMA tile's schedule
        gemm = "fp8_scaled_mm_pingpong_kernel"
    kernels = {(gemm, config.use_tma and config.swap_ab, fixup)}
    if fixup == "reduce":
        kernels.add(("fp8_splitk_reduce_kernel", False, fixup))
    return kernels


def test_shipped_sm90_table_exercises_every_launch_kind(shipped):
    """The tuned SM90 table uses TMA, swapped operands and the fused fix-up, so the shipped
    lint compiles every GEMM kernel it launches in each launch shape (the separate reduce
    kernel is linted as a fixed kernel whatever the table picks)."""
    variants = [v for e in _table(shipped, "sm90", "sm_90").entries for v in e.variants]
    tma, pointer = "fp8_scaled_mm_tma_kernel", "fp8_scaled_mm_kernel"
    assert {(v.kernel, v.swap_ab, v.fixup) for v in variants} >= {
        (tma, True, "fused"), (tma, True, ""), (tma, False, "fused"), (tma, False, ""),
        (pointer, False, "fused"), (pointer, False, "")}
    assert any(f.name == "fp8_splitk_reduce_kernel" for f in lint.FIXED_KERNELS)


def test_default_entry_compiles_both_k_tail_modes_and_a_misaligned_k(shipped):
    entry = _table(shipped, "sm90", "sm_90").entries[0]
    assert ({v.even_k for v in entry.variants}, {v.k % 16 == 0 for v in entry.variants}) == \
        ({True, False}, {True, False})


def test_decode_specialisation_is_compiled(shipped):
    entry = _table(shipped, "sm120", "sm_120").entries[0]
    assert {v.block_m for v in entry.variants if v.m == 1} == {16}


@pytest.mark.parametrize("kernel, note", [
    ("fp8_splitk_reduce_kernel", "no MMA (ordered fp32 sum)"),
    ("fp8_quantize_kernel", "no MMA (elementwise)"),
], ids=["splitk-reduce", "quantize"])
def test_kernels_without_tiles_are_listed_with_no_mma(shipped, kernel, note):
    rows = [f for f in shipped.fixed_kernels if f.kernel == kernel and f.status == "ok"]
    assert {f.capability for f in rows} >= {89, 90, 100, 120}
    assert {f.summary for f in rows} == {note}


# ------------------------------------------------------------------ candidate tables

def test_seed_table_on_sm90_fails(seed_on_sm90):
    assert not seed_on_sm90.ok


def test_seed_table_on_sm90_names_arch_and_entry(seed_on_sm90):
    (message,) = seed_on_sm90.violations
    assert message.startswith("sm_90 (sm120 table) entry default:")


def test_seed_table_on_sm90_names_the_mixed_tiles(seed_on_sm90):
    (message,) = seed_on_sm90.violations
    assert "BLOCK_M 16, 32 (mma.sync m16n8k16 f16) vs BLOCK_M 128 (wgmma m64n64k32 e4m3)" \
        in message


def test_mixed_table_on_sm90_groups_block_m_by_instruction(tmp_path):
    raw = json.loads(open(_seed_table_path()).read())
    raw["default"]["m_tiles"] = [
        {"max_m": 16, "block_m": 16, "num_warps": 4, "num_stages": 3},
        {"max_m": 32, "block_m": 32, "num_warps": 4, "num_stages": 3},
        {"max_m": 64, "block_m": 64, "num_warps": 4, "num_stages": 3},
        {"max_m": None, "block_m": 128, "num_warps": 4, "num_stages": 3},
    ]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(raw))
    result = lint.lint_table(str(path), ["sm90"], override_stages=(),
                                    include_fixed=False)
    assert result.violations == [
        "sm_90 (sm120 table) entry default: BLOCK_M 16, 32 (mma.sync m16n8k16 f16) vs "
        "BLOCK_M 64, 128 (wgmma m64n64k32 e4m3)"]


# A candidate table using every launch variant on SM90: TMA loads with the fused split-K
# fix-up, pointer loads with the separate reduce kernel, TMA single pass with split_k > 1.
# Distinct BLOCK_M / BLOCK_N / BLOCK_K so descriptor block shapes cannot be confused.
VARIANT_TABLE = {
    "family": "sm90", "expected_mma": "wgmma m64nNk32 e4m3",
    "default": {"block_n": 32, "block_k": 256, "split_k": 1, "group_m": 8, "m_tiles": [
        {"max_m": None, "block_m": 64, "num_warps": 4, "num_stages": 3, "use_tma": True}]},
    "entries": [{"n": 4096, "k": 12288, "block_n": 32, "block_k": 256, "split_k": 4,
                 "m_tiles": [
                     {"max_m": 16, "block_m": 64, "num_warps": 4, "num_stages": 3,
                      "use_workspace": True, "use_tma": True},
                     {"max_m": 64, "block_m": 64, "num_warps": 4, "num_stages": 3,
                      "use_workspace": True, "fused_fixup": False},
                     {"max_m": None, "block_m": 128, "num_warps": 8, "num_stages": 3,
                      "use_tma": True}]}],
}


@pytest.fixture(scope="module")
def variant_table(tmp_path_factory, compile_lock):
    path = tmp_path_factory.mktemp("tables") / "variants.json"
    path.write_text(json.dumps(VARIANT_TABLE))
    with compile_lock:
        return lint.lint_table(str(path), override_stages=(), include_fixed=False)


def _launch_kinds(entry, tile):
    return {(v.kernel, v.write_partials, v.fixup, v.launch) for v in entry.variants
            if v.tile == tile}


def test_variant_table_passes_on_sm90(variant_table):
    table = _table(variant_table, "sm90", "sm_90")
    assert (variant_table.violations, [e.status for e in table.entries]) == ([], ["ok", "ok"])


def test_tma_kernel_is_compiled_and_its_instruction_recorded(variant_table):
    entry = _table(variant_table, "sm90", "sm_90").entries[1]
    tma = [v for v in entry.variants if v.kernel == "fp8_scaled_mm_tma_kernel"]
    assert tma and {(v.status, v.tma) for v in tma} == {("ok", True)}
    assert {(i["family"], i["k_step"], i["operand_type"]) for v in tma
            for i in v.instructions} == {("wgmma", 32, "e4m3")}


def test_fused_fixup_tma_tile_compiles_every_launch_it_may_make(variant_table):
    entry = _table(variant_table, "sm90", "sm_90").entries[1]
    assert _launch_kinds(entry, 0) == {
        ("fp8_scaled_mm_tma_kernel", True, "fused", "selected"),
        ("fp8_scaled_mm_kernel", True, "fused", "pointer fallback"),
        ("fp8_scaled_mm_tma_kernel", False, "", "single-pass check"),
        ("fp8_scaled_mm_kernel", False, "", "single-pass check"),
    }


def test_separate_reduce_tile_compiles_the_reduce_kernel_without_mma(variant_table):
    entry = _table(variant_table, "sm90", "sm_90").entries[1]
    assert _launch_kinds(entry, 1) == {
        ("fp8_scaled_mm_kernel", True, "reduce", "selected"),
        ("fp8_splitk_reduce_kernel", True, "reduce", "selected"),
        ("fp8_scaled_mm_kernel", False, "", "single-pass check"),
    }
    (reduce,) = [v for v in entry.variants if v.kernel == "fp8_splitk_reduce_kernel"]
    assert (reduce.status, reduce.summary, reduce.instructions) == \
        ("ok", "no MMA (ordered fp32 sum)", [])


def test_split_k_single_pass_tma_tile_compiles_both_loads(variant_table):
    entry = _table(variant_table, "sm90", "sm_90").entries[1]
    assert {(v.kernel, v.split_k, v.write_partials) for v in entry.variants if v.tile == 2} \
        == {("fp8_scaled_mm_tma_kernel", 4, False), ("fp8_scaled_mm_kernel", 4, False)}


def test_default_entry_reaches_pointer_loads_through_a_misaligned_k(variant_table):
    entry = _table(variant_table, "sm90", "sm_90").entries[0]
    assert {v.kernel for v in entry.variants if v.k % 16} == {"fp8_scaled_mm_kernel"}
    assert {v.kernel for v in entry.variants if v.k % 16 == 0} == {"fp8_scaled_mm_tma_kernel"}


def test_pointer_fallback_runs_on_operands_tma_cannot_take():
    config = LaunchConfig(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=3,
                          split_k=1, group_m=8, use_workspace=False, use_tma=True)
    selected, fallback = gemm_launches(GemmCase(config, 256, 512, 1024))
    ((call, pointer),) = fallback.calls
    job = specialize(pointer, call.module, call.kernel, 90)
    assert (selected.use_tma, fallback.use_tma, fallback.launch) == \
        (True, False, "pointer fallback")
    assert "a_ptr" not in job.divisible and "b_ptr" in job.divisible


def test_variant_table_rows_name_loads_and_fixups(variant_table):
    text = variant_table.to_text()
    assert "TMA+pointer loads, partials+fused, single-pass" in text
    assert "partials+reduce, single-pass" in text


@pytest.mark.parametrize("block_m, block_n, block_k", [(64, 32, 128), (128, 64, 256)])
def test_tma_descriptor_block_shapes_follow_the_config(block_m, block_n, block_k):
    config = LaunchConfig(block_m=block_m, block_n=block_n, block_k=block_k, num_warps=4,
                          num_stages=3, split_k=1, group_m=8, use_workspace=False,
                          use_tma=True)
    launch = gemm_launches(GemmCase(config, 256, 512, 1024))[0]
    (call, bound), = launch.calls
    job = dict(specialize(bound, call.module, call.kernel, 90).signature)
    assert (call.kernel, job["a_desc"], job["b_desc"]) == (
        "fp8_scaled_mm_tma_kernel", f"tensordesc<fp8e4nv[{block_m}, {block_k}]>",
        f"tensordesc<fp8e4nv[{block_n}, {block_k}]>")


def test_entry_mixing_instructions_between_loads_is_named_by_loads():
    def variant(tma, summary):
        return lint.VariantResult(
            kernel="k", tile=0, m_range=">=1", m=64, block_m=64, block_n=64, block_k=128,
            num_warps=4, num_stages=3, stages_source="table", split_k=1, group_m=8,
            write_partials=False, even_k=True, k=4096, tma=tma, fixup="",
            launch="selected", expects_mma=True, status="ok", summary=summary)
    groups = {"wgmma m64n64k32 e4m3": [variant(True, "wgmma m64n64k32 e4m3")],
              "mma.sync m16n8k16 f16": [variant(False, "mma.sync m16n8k16 f16")]}
    assert lint.describe_groups(groups) == \
        "loads TMA (wgmma m64n64k32 e4m3) vs loads pointer (mma.sync m16n8k16 f16)"


def test_table_on_unlisted_arch_is_reported_not_skipped():
    result = lint.lint_table(_seed_table_path(), ["sm_86"], override_stages=(),
                                    include_fixed=False)
    table = _table(result, "sm120", "sm_86")
    assert (table.role, [e.status for e in table.entries]) == ("candidate", ["unsupported"])


def test_unsupported_on_the_familys_own_target_is_a_violation(monkeypatch):
    monkeypatch.setitem(lint.FAMILY_TARGETS, "sm120", (80,))
    result = lint.lint_table(_seed_table_path(), override_stages=(),
                                    include_fixed=False)
    assert [e.status for e in _table(result, "sm120", "sm_80").entries] == ["violation"]


def test_wrong_expected_mma_on_primary_target_is_a_violation(tmp_path):
    raw = json.loads(open(_seed_table_path().replace("sm120", "sm90")).read())
    raw["expected_mma"] = "mma.sync m16n8k32 e4m3"
    raw["entries"] = []  # the default entry shows it
    path = tmp_path / "sm90-wrong-expectation.json"
    path.write_text(json.dumps(raw))
    result = lint.lint_table(str(path), override_stages=(), include_fixed=False)
    assert any("expected_mma 'mma.sync m16n8k32 e4m3'" in v for v in result.violations)


@pytest.mark.parametrize("expected, summary, match", [
    ("wgmma m64nNk32 e4m3", "wgmma m64n128k32 e4m3", True),
    ("tcgen05.mma kind::f8f6f4", "tcgen05.mma kind::f8f6f4 m128n128k32 e4m3", True),
    ("mma.sync m16n8k32 e4m3", "mma.sync m16n8k16 f16", False),
    ("wgmma m64nNk32 e4m3", "mma.sync m16n8k16 f16", False),
], ids=["wildcard-n", "subset-of-tokens", "k-and-type-differ", "family-differs"])
def test_expected_mma_matching(expected, summary, match):
    assert lint.expected_matches(expected, [summary]) is match


# ------------------------------------------------------------------ mechanics

def test_repeat_lint_reuses_compiled_variants(seed_on_sm90):
    again = lint.lint_table(_seed_table_path(), ["sm_90"])
    total = seed_on_sm90.compiled + seed_on_sm90.cache_hits
    assert (again.compiled, again.cache_hits) == (0, total)


def test_worker_environment_drops_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "TRITON_INTERPRET" not in worker.worker_env()


def test_compile_worker_starts_from_the_package():
    """The parent starts workers as `python -m det_suite.lint --compile-worker`."""
    import importlib.util
    assert worker.WORKER_MODULE == "det_suite.lint"
    assert importlib.util.find_spec("det_suite.lint.__main__") is not None


def test_compiles_with_interpreter_set_in_parent(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    launch = lint.quantize_launch()
    launch.options = {"num_warps": 2}  # a job no other test compiles
    job = specialize(launch, "det_suite.kernels.fp8_quantize", "fp8_quantize_kernel", 89)
    (outcome,) = lint.compile_outcomes([job], workers=1)
    assert (outcome.ok, outcome.instructions, outcome.error) == (True, [], None)


@pytest.mark.parametrize("family", sorted(FAMILY_TARGETS))
def test_family_targets_are_the_capabilities_routed_to_the_family(family):
    assert {family_of_capability(c // 10, c % 10) for c in FAMILY_TARGETS[family]} == {family}


@pytest.mark.parametrize("text, capability", [
    ("sm_90", 90), ("sm90", 90), ("sm_90a", 90), ("90", 90), ("12.0", 120), (100, 100),
], ids=["sm_90", "sm90", "sm_90a", "bare", "dotted", "int"])
def test_parse_arch(text, capability):
    assert lint.parse_arch(text) == capability


@pytest.mark.parametrize("text", ["hopper", "sm_6", ""], ids=["name", "too-old", "empty"])
def test_parse_arch_rejects(text):
    with pytest.raises(ValueError, match="arch"):
        lint.parse_arch(text)


# The lint compiles what ops launches, from one kernel registry. ops.launch_fp8_gemm and
# ops.launch_quantize launch from ops.launch_spec's descriptions through a Launcher, and
# look each kernel up in det_suite.kernels.registry; the lint binds the same descriptions
# to stand-ins and compiles the registry's (module, name). These tests catch the rest
# drifting: a launch bypassing the spec or the registry, the lint's stand-in tensors
# differing from the real ones, the spec disagreeing with a kernel, the lint compiling a
# kernel the registry does not name (or missing one it does).


def _params(kernel):
    """(runtime parameters in order, constexpr parameters) of a JIT or interpreted kernel."""
    fn = getattr(kernel, "fn", kernel)
    runtime, constexprs = [], set()
    for name, param in inspect.signature(fn).parameters.items():
        annotation = param.annotation
        is_constexpr = annotation is not inspect.Parameter.empty and "constexpr" in str(
            getattr(annotation, "__name__", annotation))
        (constexprs.add(name) if is_constexpr else runtime.append(name))
    return runtime, constexprs


class _Recorder:
    """A Launcher (ops.launch.Launcher) that records each launch instead of running it."""

    def __init__(self):
        self.calls = []

    def __call__(self, kernel, call, args, keywords):
        self.calls.append((kernel, call, args, keywords))


def _recorded_job(recorded, capability=90):
    """The compile job of a recorded launch, named by the launched function itself: its
    module and name, its own parameter names for the positional arguments."""
    kernel, _call, args, keywords = recorded
    fn = getattr(kernel, "fn", kernel)
    runtime, constexpr_names = _params(kernel)
    launch = KernelLaunch(dict(zip(runtime, args)),
                          {k: v for k, v in keywords.items() if k in constexpr_names},
                          {k: v for k, v in keywords.items() if k not in constexpr_names})
    return specialize(launch, fn.__module__, fn.__name__, capability)


LAUNCH_CASES = [
    # m, k, split_k, use_workspace, fused_fixup, use_tma
    (1, 256, 1, False, True, False), (40, 256, 1, False, True, False),
    (40, 320, 1, False, True, False), (1, 512, 2, True, False, False),
    (33, 320, 2, True, False, False), (1, 512, 2, True, True, False),
    (33, 320, 2, True, True, False), (40, 256, 1, False, True, True),
    (40, 320, 2, False, True, True), (1, 512, 2, True, True, True),
    (33, 320, 2, True, False, True), (33, 264, 2, True, True, True),
]
LAUNCH_IDS = ["decode", "prefill", "k-tail", "reduce-decode", "reduce-k-tail", "fused-decode",
              "fused-k-tail", "tma", "tma-split-k-single-pass", "tma-fused-decode",
              "tma-reduce-k-tail", "tma-misaligned-k-falls-back"]


def _config(split_k, use_workspace, fused_fixup, use_tma, swap_ab=False):
    return LaunchConfig(block_m=16 if swap_ab else 32, block_n=64, block_k=128, num_warps=4,
                        num_stages=3, split_k=split_k, group_m=8, use_workspace=use_workspace,
                        use_tma=use_tma, fused_fixup=fused_fixup, swap_ab=swap_ab)


# Every LAUNCH_CASE, and the TMA ones with swapped operands (swap_ab).
SPEC_CASES = [(*case, False) for case in LAUNCH_CASES] + [
    (*case, True) for case in LAUNCH_CASES if case[5]]
SPEC_IDS = LAUNCH_IDS + [f"swap-ab-{i}" for case, i in zip(LAUNCH_CASES, LAUNCH_IDS) if case[5]]

# The pointer fallback the lint compiles for a TMA tile, against a launch on an activation
# whose base is off 16-byte alignment (TMA-able K).
MIRROR_CASES = [(*case, True) for case in SPEC_CASES] + [
    (*case, False) for case in SPEC_CASES if case[5] and case[1] % 16 == 0]
MIRROR_IDS = SPEC_IDS + [f"{i}-offset-activation" for case, i in zip(SPEC_CASES, SPEC_IDS)
                         if case[5] and case[1] % 16 == 0]


def _fp8_operands(m, n, k, offset=0):
    a = torch.empty(m * k + 64, dtype=torch.float8_e4m3fn)
    a = a[(-a.data_ptr()) % 16 + offset:][:m * k].view(m, k)
    return a, torch.empty((n, k), dtype=torch.float8_e4m3fn).t()


@pytest.mark.parametrize("m, k, split_k, use_workspace, fused_fixup, use_tma, swap_ab, aligned",
                         MIRROR_CASES, ids=MIRROR_IDS)
def test_gemm_launch_mirrors_ops(m, k, split_k, use_workspace, fused_fixup, use_tma, swap_ab,
                                 aligned):
    n = 192
    config = _config(split_k, use_workspace, fused_fixup, use_tma, swap_ab)
    launches = gemm_launches(GemmCase(config, m, n, k))
    mirrored = launches[0] if aligned else \
        next(la for la in launches if la.launch == "pointer fallback")
    recorder = _Recorder()
    a, b_kn = _fp8_operands(m, n, k, 0 if aligned else lint.MISALIGNED_BASE_OFFSET)
    scale = torch.ones(1)
    ops.launch_fp8_gemm(a, b_kn, scale, scale, None, torch.empty((m, n), dtype=torch.bfloat16),
                        config, launcher=recorder)
    real = [_recorded_job(c) for c in recorder.calls]
    assert real == [specialize(bound, call.module, call.kernel, 90)
                    for call, bound in mirrored.calls]
    assert [call.grid for _k, call, _a, _kw in recorder.calls] == \
        [call.grid for call, _bound in mirrored.calls]


@pytest.mark.parametrize("m, k, split_k, use_workspace, fused_fixup, use_tma, swap_ab",
                         SPEC_CASES, ids=SPEC_IDS)
def test_launchers_see_the_registry_kernels(m, k, split_k, use_workspace, fused_fixup,
                                            use_tma, swap_ab):
    """Each launch hands the Launcher registry.kernel(name) of the kernel its call names."""
    n = 192
    recorder = _Recorder()
    a, b_kn = _fp8_operands(m, n, k)
    scale = torch.ones(1)
    ops.launch_fp8_gemm(a, b_kn, scale, scale, None, torch.empty((m, n), dtype=torch.bfloat16),
                        _config(split_k, use_workspace, fused_fixup, use_tma, swap_ab),
                        launcher=recorder)
    ops.launch_quantize(torch.empty((m, k), dtype=torch.bfloat16), scale, launcher=recorder)
    assert recorder.calls and all(kernel is registry.kernel(call.kernel)
                                  for kernel, call, _a, _kw in recorder.calls)
    assert recorder.calls[-1][1].kernel == "fp8_quantize_kernel"


def _spec_calls():
    """Every KernelCall ops.launch_spec describes over SPEC_CASES, and the quantization."""
    calls = [call for m, k, split_k, use_workspace, fused_fixup, use_tma, swap_ab in SPEC_CASES
             for has_bias in (False, True)
             for call in ops.gemm_launch_spec(
                 _config(split_k, use_workspace, fused_fixup, use_tma, swap_ab), m, 192, k,
                 has_bias=has_bias, use_tma=use_tma).calls]
    # A warp-specialised tile (SM90's promotion interval as BLOCK_K): the Gluon kernel.
    pingpong = replace(_config(1, False, True, True), block_m=128, block_k=256, promote_k=256,
                       warp_specialized=True)
    calls += ops.gemm_launch_spec(pingpong, 512, 192, 512, has_bias=True, use_tma=True).calls
    return calls + [ops.quantize_launch_spec(40, 320)]


SPEC_CALLS = _spec_calls()
# The batch-invariant ops' launches (ops.bi_launch_spec), one per kernel.
OP_SPEC_CALLS = [bi_launch_spec.matmul_launch_spec(40, 192, 320, has_bias=True),
                 bi_launch_spec.rmsnorm_launch_spec(40, 320, 1e-6),
                 *bi_launch_spec.log_softmax_launch_spec(40, 320),
                 bi_launch_spec.qk_norm_rope_launch_spec(40, 4, 2, 16, 96, 1e-6),
                 bi_launch_spec.attention_launch_spec(40, 2, 4, 2, 16, 16, 0.25),
                 *bi_launch_spec.attention_split_launch_spec(2, 2, 4, 2, 16, 16, 8, 0.25),
                 bi_launch_spec.rmsnorm_quantize_launch_spec(40, 320, 1e-6, 3),
                 bi_launch_spec.mul_quantize_launch_spec(40, 320)]


def test_every_launched_kernel_is_a_registry_entry():
    calls = SPEC_CALLS
    gemm = {call.kernel for call in calls[:-1]}
    assert gemm == set(registry.GEMM_KERNELS)
    assert calls[-1].kernel in registry.KERNELS and not registry.entry(calls[-1].kernel).gemm
    assert {call.kernel for call in calls + OP_SPEC_CALLS} == set(registry.KERNELS)


def test_the_lint_compiles_exactly_the_registry_kernels():
    """Over the shipped tables and fixed kernels, the lint compiles (module, name) pairs
    that are exactly the registry's entries."""
    from det_suite.policy.warp_specialized import gluon_release_supported

    jobs, _caps = lint.plan(lint.shipped_pairs(), lint.OVERRIDE_STAGES, True)
    # The Gluon kernel is compiled as a candidate only on the Triton its Gluon API is for.
    skipped = set() if gluon_release_supported() else {"fp8_scaled_mm_pingpong_kernel"}
    assert {(job.module, job.attr) for job in jobs} == \
        {(entry.module, entry.name) for entry in registry.KERNELS.values()
         if entry.name not in skipped}


def test_fixed_kernels_are_the_registry_kernels_without_mma():
    assert [kernel.name for kernel in lint.FIXED_KERNELS] == \
        [name for name, entry in registry.KERNELS.items() if entry.operand_dtype is None]
    for kernel in lint.FIXED_KERNELS:
        assert isinstance(lint.fixed_kernel_launch(kernel.name), KernelLaunch), kernel.name


@pytest.mark.parametrize("name", list(registry.KERNELS))
def test_registry_entries_load_from_their_module(name):
    import importlib
    entry = registry.entry(name)
    kernel = registry.kernel(name)
    assert getattr(importlib.import_module(entry.module), name) is kernel is entry.load()
    assert getattr(kernel, "fn", kernel).__name__ == name


def test_unknown_kernel_names_the_registry():
    with pytest.raises(KeyError, match="det_suite.kernels.registry"):
        registry.entry("fp8_no_such_kernel")


@pytest.mark.parametrize("call", SPEC_CALLS + OP_SPEC_CALLS,
                         ids=[f"{i}-{call.kernel}"
                              for i, call in enumerate(SPEC_CALLS + OP_SPEC_CALLS)])
def test_launch_spec_matches_kernel_signatures(call):
    runtime, constexprs = _params(registry.kernel(call.kernel))
    assert ([name for name, _ in call.args], {name for name, _ in call.constexprs}) == \
        (runtime, constexprs), call.kernel


def test_worker_rejects_a_launch_in_the_wrong_argument_order():
    launch = lint.quantize_launch()
    launch.args = dict(reversed(list(launch.args.items())))
    job = specialize(launch, "det_suite.kernels.fp8_quantize", "fp8_quantize_kernel", 89)
    (outcome,) = lint.compile_outcomes([job], workers=1)
    assert not outcome.ok and "in the order" in outcome.error


@pytest.mark.parametrize("kernel_attr, builder", [
    ("fp8_quantize_kernel", lint.quantize_launch),
    ("fp8_splitk_reduce_kernel", lint.reduce_launch),
], ids=["quantize", "splitk-reduce"])
def test_fixed_kernel_launch_mirrors_ops(kernel_attr, builder):
    recorder = _Recorder()
    m, n, k = lint.UNBOUNDED_M, lint.REPRESENTATIVE_N, lint.REPRESENTATIVE_K
    if kernel_attr == "fp8_quantize_kernel":
        ops.launch_quantize(torch.empty((m, k), dtype=torch.bfloat16), torch.ones(1),
                            launcher=recorder)
    else:
        ops.launch_fp8_gemm(torch.empty((m, k), dtype=torch.float8_e4m3fn),
                            torch.empty((n, k), dtype=torch.float8_e4m3fn).t(), torch.ones(1),
                            torch.ones(1), None, torch.empty((m, n), dtype=torch.bfloat16),
                            LaunchConfig(**lint.REDUCE_CONFIG), launcher=recorder)
    (recorded,) = [c for c in recorder.calls if c[1].kernel == kernel_attr]
    assert _recorded_job(recorded) == specialize(builder(), registry.entry(kernel_attr).module,
                                                 kernel_attr, 90)


# ------------------------------------------------------------------ report and CLI

def test_instruction_table_is_plain_json_data():
    data = lint.instruction_table(families=("sm90",))
    assert json.loads(json.dumps(data))["tables"][0]["family"] == "sm90"


def test_markdown_lists_each_tile(shipped):
    text = shipped.to_markdown()
    default = shipped_policy("sm90").default
    last, low = default.select(1 << 20), default.m_tiles[-2].max_m + 1
    assert (f"| sm_90 | sm90 | primary | default | >={low} | {last.block_m} | {last.block_n} | "
            f"{last.num_warps} |") in text


def test_cli_fails_on_seed_table_on_sm90(seed_on_sm90, tmp_path, capsys):
    code = cli_main(["lint-policy", "--table", _seed_table_path(), "--arch", "sm_90",
                     "--json", str(tmp_path / "lint.json")])
    assert (code, "VIOLATION: sm_90 (sm120 table) entry default" in capsys.readouterr().out) \
        == (1, True)


def test_cli_json_carries_lint_and_environment(seed_on_sm90, tmp_path):
    path = tmp_path / "lint.json"
    cli_main(["lint-policy", "--table", _seed_table_path(), "--arch", "sm_90",
              "--json", str(path), "--markdown", str(tmp_path / "lint.md")])
    data = json.loads(path.read_text())
    assert (data["lint"]["ok"], "triton" in data["environment"]) == (False, True)


def test_cli_passes_on_a_shipped_family(shipped, capsys):
    assert cli_main(["lint-policy", "--family", "sm89"]) == 0


@pytest.mark.parametrize("argv", [
    ["--arch", "hopper"], ["--family", "sm75"], ["--stages", "9"], ["--table", "/nonexistent.json"],
], ids=["bad-arch", "unknown-family", "bad-stages", "missing-table"])
def test_cli_usage_errors_exit_2(argv, capsys):
    assert cli_main(["lint-policy", *argv]) == 2
