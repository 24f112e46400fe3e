"""The warp-specialised SM90 GEMM (`kernels/fp8_scaled_mm_pingpong.py`): where a table may
ask for it, how it is launched, and that it gives the TMA tile's bits.

CPU: the table validation, the launch description, and the launcher's fallback. The Triton
interpreter cannot run Gluon at all (a Gluon kernel launched under TRITON_INTERPRET=1 asks
for a GPU driver), so on the CPU a warp-specialised tile runs the TMA kernel, whose schedule
it declares; its own bits are compared on an SM90 GPU (the sm90 cases below) and its PTX is
checked by the lint (tests/unit/lint/test_pingpong_lint.py).
"""

import functools
from dataclasses import replace

import pytest
import torch

from det_suite.invariance.cases import stress_operands
from det_suite.ops import fp8_scaled_mm, gemm_launch_spec, launch_fp8_gemm, quantize_fp8
from det_suite.policy import LaunchConfig, parse_policy
from det_suite.policy.tiles import promotion_k
from det_suite.policy.warp_specialized import MAXNREG, NUM_WARPS, shared_bytes

PROMOTE_K = promotion_k("sm90")
PINGPONG = "fp8_scaled_mm_pingpong_kernel"
# A device name for tests that fake CUDA's answers (the launcher's queries are patched).
FAKED_GPU = "cuda"


def ws_config(**changes):
    base = LaunchConfig(block_m=128, block_n=128, block_k=PROMOTE_K, num_warps=8, num_stages=3,
                        split_k=1, group_m=8, use_workspace=False, use_tma=True,
                        promote_k=PROMOTE_K, warp_specialized=True)
    return replace(base, **changes)


def _table(family="sm90", **tile):
    large = {"max_m": None, "block_m": 128, "num_warps": 8, "num_stages": 3, "use_tma": True,
             "warp_specialized": True, **tile}
    return {"family": family, "default": {"block_n": 128, "block_k": 256, "m_tiles": [
        {"max_m": 256, "block_m": 64, "num_warps": 4, "num_stages": 4, "use_tma": True},
        large]}}


# ---------------------------------------------------------------- the table field

def test_table_field_round_trips_and_keeps_the_schedule():
    from det_suite.policy import policy_json

    policy = parse_policy(_table(), "candidate.json")
    small, large = policy.select(64, 4096, 4096), policy.select(4096, 4096, 4096)
    assert (small.warp_specialized, large.warp_specialized) == (False, True)
    assert small.reduction_schedule(4096) == large.reduction_schedule(4096)
    again = parse_policy(policy_json(policy), "again.json")
    assert again.default.m_tiles == policy.default.m_tiles


@pytest.mark.parametrize("family,tile,match", [
    ("sm120", {}, "families sm90"),
    ("sm90", {"block_m": 64, "num_warps": 4}, "block_m 128"),
    ("sm90", {"block_n": 256}, "block_n in"),
    ("sm90", {"use_tma": False}, "load by TMA"),
    ("sm90", {"use_pdl": True}, "load by TMA"),
    ("sm90", {"num_stages": 4}, "shared"),
], ids=["not-sm90", "block-m-64", "block-n-256", "pointer-loads", "pdl", "ring-too-deep"])
def test_table_rejects_a_tile_the_kernel_cannot_run(family, tile, match):
    with pytest.raises(ValueError, match=match):
        parse_policy(_table(family, **tile), "candidate.json")


def test_ring_fits_hopper_shared_memory_at_three_stages():
    assert shared_bytes(128, 256, 3) == 3 * 256 * 256  # 192 KiB of 227
    raw = _table()
    raw["default"]["block_k"] = 512  # two promotion intervals a K step
    with pytest.raises(ValueError, match="block_k must be 256"):
        parse_policy(raw, "candidate.json")


@pytest.mark.parametrize("shape", [(4096, 14336), (2560, 9728), (1536, 7168), (4000, 80),
                                   (28672, 4096), (3072, 3072)], ids=str)
def test_the_rule_serves_large_m_warp_specialized_from_k_alone_with_one_schedule(
        monkeypatch, shape):
    """As shipped, the rule's M > 256 tile runs the kernel where K >= the measured minimum,
    on the schedule every other M of the shape runs; switched off, nowhere."""
    from det_suite.policy import generic, shipped_policy
    from det_suite.policy.schedule_identity import schedules_over_m
    from det_suite.policy.warp_specialized import RULE_WARP_SPECIALIZED_MIN_K

    n, k = shape
    ms = (1, 16, 32, 33, 256, 257, 4096)
    on = RULE_WARP_SPECIALIZED_MIN_K is not None and k >= RULE_WARP_SPECIALIZED_MIN_K
    generic.generic_entry.cache_clear()
    try:
        policy = shipped_policy("sm90").on_device(132)
        assert [policy.select(m, n, k).warp_specialized for m in ms] == [False] * 5 + [on] * 2
        assert len(schedules_over_m(policy, n, k, ms)) == 1
        monkeypatch.setattr(generic, "RULE_WARP_SPECIALIZED_MIN_K", None)
        generic.generic_entry.cache_clear()
        off = shipped_policy("sm90").on_device(132)
        assert not any(off.select(m, n, k).warp_specialized for m in ms)
    finally:
        generic.generic_entry.cache_clear()


# ---------------------------------------------------------------- the launch

@pytest.mark.parametrize("max_programs,grid", [(0, 32 * 4), (132, 128), (1000, 128)])
def test_launch_is_one_call_on_a_grid_capped_by_the_sm_count(max_programs, grid):
    spec = gemm_launch_spec(ws_config(max_programs=max_programs), 4096, 512, 4096,
                            has_bias=True, use_tma=True)
    (call,) = spec.calls
    constexprs, options = dict(call.constexprs), dict(call.options)
    assert (call.kernel, call.grid) == (PINGPONG, (grid,))
    assert spec.workspace_shape is None and spec.counter_tiles == 0
    assert (constexprs["PROMOTE_K"], constexprs["BLOCK_K"], constexprs["STAGES"]) == \
        (PROMOTE_K, PROMOTE_K, 3)
    assert (options["num_warps"], options["maxnreg"], options["enable_fp_fusion"]) == \
        (NUM_WARPS, MAXNREG, False)


def test_split_k_runs_in_registers_with_whole_interval_chunks():
    config = ws_config(split_k=3)
    (call,) = gemm_launch_spec(config, 4096, 512, 12288, has_bias=False, use_tma=True).calls
    args = dict(call.args)
    assert call.kernel == PINGPONG and dict(call.constexprs)["SPLIT_K"] == 3
    assert args["K_CHUNK"].value == config.k_chunk(12288) == 16 * PROMOTE_K


@pytest.mark.parametrize("change,kwargs", [
    ({}, dict(use_tma=False)),
    ({}, dict(segment_ends=(256,))),
    (dict(use_workspace=True, split_k=2), {}),
], ids=["pointer-operands", "segmented", "workspace"])
def test_other_launches_fall_back_to_the_tma_or_pointer_kernel(change, kwargs):
    kwargs = {"use_tma": True, **kwargs}
    spec = gemm_launch_spec(ws_config(**change), 64, 512, 4096, has_bias=False, **kwargs)
    assert PINGPONG not in {call.kernel for call in spec.calls}


def test_interpreter_runs_the_tma_tile_in_its_place(device):
    if device != "cpu":
        pytest.skip("the CPU fallback; the GPU runs the kernel (sm90 cases below)")
    seen = []

    def record(kernel, call, args, keywords):
        seen.append(call.kernel)
    problem, x = stress_operands(64, 512, 5, device="cpu", bias=True)
    a = quantize_fp8(x, problem.input_scale)
    out = torch.empty(5, 64, dtype=torch.bfloat16)
    launch_fp8_gemm(a, problem.weight.t(), problem.input_scale, problem.weight_scale,
                    problem.bias, out, ws_config(), launcher=record)
    assert seen == ["fp8_scaled_mm_tma_kernel"]


@pytest.mark.parametrize("major,expected", [(9, (True, 132)), (12, (False, 0)),
                                            (10, (False, 0))], ids=["sm90", "sm120", "sm100"])
def test_only_an_sm90_gpu_runs_it(monkeypatch, major, expected):
    """Another GPU serving the SM90 table (DET_SUITE_ARCH) has no wgmma: it runs the TMA
    tile, the same schedule. (CUDA's answers are faked: no GPU needed.)"""
    import det_suite.ops.launch as launch

    monkeypatch.setattr(launch, "_capability_major", lambda index: major)
    monkeypatch.setattr(launch, "sm_count", lambda index: 132)
    monkeypatch.setattr(launch, "_served_tile", functools.lru_cache(launch._served_tile.__wrapped__))
    config = launch._warp_specialized_on(ws_config(), torch.device(FAKED_GPU, 0))
    assert (config.warp_specialized, config.max_programs) == expected


# ---------------------------------------------------------------- GPU (sm90): the bits

GPU_MS = (1, 7, 64, 512, 2048)
# (N, K): Qwen3-8B's o and down (K = 12288 with split 2), an N tail (4000) with a K tail
# (4176 = 16 intervals + 80), and small N with large K split 4.
GPU_SHAPES = [(4096, 4096, 1), (4096, 12288, 2), (4000, 4176, 1), (1536, 7168, 1),
              (2048, 8192, 4)]
GPU_CASES = [pytest.param(n, k, split, m, id=f"{n}x{k}-split{split}-m{m}")
             for n, k, split in GPU_SHAPES for m in GPU_MS]


def _gpu_pair(n, k, split, m):
    problem, x = stress_operands(n, k, m, device="cuda", bias=True)
    a = quantize_fp8(x, problem.input_scale)
    tma = ws_config(split_k=split, warp_specialized=False)

    def run(config):
        return fp8_scaled_mm(a, problem.weight, problem.input_scale, problem.weight_scale,
                             problem.bias, weight_layout="nk", config=config)
    return run(replace(tma, warp_specialized=True)), run(tma)


@pytest.mark.gpu
@pytest.mark.sm90
@pytest.mark.parametrize("n,k,split,m", GPU_CASES)
def test_gpu_pingpong_gives_the_tma_tiles_bits(n, k, split, m, bit_exact):
    pingpong, tma = _gpu_pair(n, k, split, m)
    assert bit_exact(pingpong, tma)


@pytest.mark.gpu
@pytest.mark.sm90
def test_gpu_comparison_flags_another_split(bit_exact):
    """Counterpart: the same kernel with another split regroups the sum, so the comparison
    above can fail."""
    problem, x = stress_operands(4096, 12288, 512, device="cuda", bias=True)
    a = quantize_fp8(x, problem.input_scale)
    outs = [fp8_scaled_mm(a, problem.weight, problem.input_scale, problem.weight_scale,
                          problem.bias, weight_layout="nk", config=ws_config(split_k=s))
            for s in (1, 2)]
    assert not bit_exact(*outs)


@pytest.mark.gpu
@pytest.mark.sm90
@pytest.mark.parametrize("m", (1, 7, 129, 512))
def test_gpu_pingpong_suffix_rows_match_the_full_call(m, bit_exact):
    """Rows of an m-row call against the same rows inside a 2048-row call: the persistent
    grid follows M, the arithmetic must not."""
    problem, x = stress_operands(4096, 4096, 2048, device="cuda", bias=True)
    a = quantize_fp8(x, problem.input_scale)

    def run(rows):
        return fp8_scaled_mm(rows, problem.weight, problem.input_scale, problem.weight_scale,
                             problem.bias, weight_layout="nk", config=ws_config())
    assert bit_exact(run(a[-m:]), run(a)[-m:])
