"""`det-suite bench gemm`: shape parsing, summaries, tables, the accuracy gate in front of
every timing, the library entry point (`bench_gemm`: settings in, result out) and the
command over it, and the no-GPU exit. `gpu`/`perf` tests run the real benchmark on one small
shape."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from det_suite.bench.gemm import (
    REFERENCE_VENDOR, BenchRun, BenchUsageError, CellResult, GemmBenchSettings, GemmShape,
    bench_gemm, check_accuracy, config_policy, format_markdown, format_mode_table,
    gate_failures, geometric_mean, measure_cell, parse_config_spec, parse_ms, parse_shape,
    parse_shapes, plan_gemm_bench, random_fp8, summarize, weight_floor_us)
from det_suite.bench.timing import GpuRequired
from det_suite.cli import build_parser, main
from det_suite.commands.bench import settings_from_args

REPO_ROOT = Path(__file__).resolve().parents[2]
NO_GPU_MESSAGE = "bench gemm needs a CUDA GPU; found none"
SMALL = GemmShape("small", 256, 512)


def _cell(mode="warm", shape=SMALL, m=1, det=10.0, torch_us=5.0, errors=(), config=None,
          floor=None):
    cell = CellResult(mode, shape, m, det_us=det, vendor_us={REFERENCE_VENDOR: torch_us},
                      config=config, floor_us=floor)
    cell.errors = list(errors)
    return cell


# ------------------------------------------------------------------ shapes

@pytest.mark.parametrize("spec,expected", [
    ("qwen3-8b", [("qwen3-8b/qkv", 6144, 4096), ("qwen3-8b/o", 4096, 4096),
                  ("qwen3-8b/gate_up", 24576, 4096), ("qwen3-8b/down", 4096, 12288)]),
    ("qwen3-14b", [("qwen3-14b/qkv", 7168, 5120), ("qwen3-14b/o", 5120, 5120),
                   ("qwen3-14b/gate_up", 34816, 5120), ("qwen3-14b/down", 5120, 17408)]),
    ("4096,12288", [("4096x12288", 4096, 12288)]),
    ("2048x1024", [("2048x1024", 2048, 1024)]),
    ("down=4096,12288", [("down", 4096, 12288)]),
], ids=["preset-qwen3-8b", "preset-qwen3-14b", "n-comma-k", "n-x-k", "named"])
def test_parse_shape(spec, expected):
    assert [(s.name, s.n, s.k) for s in parse_shape(spec)] == expected


@pytest.mark.parametrize("spec", ["qwen3-70b", "4096", "4096,", "0,4096", "4100,4096", "a,b"],
                         ids=["unknown-preset", "one-number", "missing-k", "zero-n",
                              "n-not-multiple-of-16", "not-numbers"])
def test_parse_shape_rejects(spec):
    with pytest.raises(ValueError, match="shape"):
        parse_shape(spec)


def test_parse_shapes_keeps_first_of_duplicate_nk():
    shapes = parse_shapes(["qwen3-8b", "4096,4096"])
    assert [s.name for s in shapes] == ["qwen3-8b/qkv", "qwen3-8b/o", "qwen3-8b/gate_up",
                                        "qwen3-8b/down"]


@pytest.mark.parametrize("values,expected", [([8, 1, 8, 8], [1, 8]), ([32], [32])],
                         ids=["sorted-unique", "single"])
def test_parse_ms(values, expected):
    assert parse_ms(values) == expected


def test_parse_ms_rejects_zero():
    with pytest.raises(ValueError, match=">= 1"):
        parse_ms([0, 8])


# ------------------------------------------------------------------ arithmetic

@pytest.mark.parametrize("values,expected", [([2.0], 2.0), ([1.0, 4.0], 2.0),
                                             ([0.5, 2.0, 8.0], 2.0)],
                         ids=["one", "two", "three"])
def test_geometric_mean(values, expected):
    assert geometric_mean(values) == pytest.approx(expected)


@pytest.mark.parametrize("values", [[], [0.0], [-1.0], [math.inf], [math.nan]],
                         ids=["empty", "zero", "negative", "inf", "nan"])
def test_geometric_mean_rejects(values):
    with pytest.raises(ValueError):
        geometric_mean(values)


@pytest.mark.parametrize("n,k,floor_us", [(6144, 4096, 5.9), (4096, 4096, 3.9),
                                          (24576, 4096, 23.6), (4096, 12288, 11.8)],
                         ids=["qkv", "o", "gate_up", "down"])
def test_weight_floor_matches_the_measured_bandwidth(n, k, floor_us):
    """docs/invariance-rule.md: at 4.27 TB/s copy bandwidth the qwen3-8b weights read in these times."""
    assert weight_floor_us(n, k, 4.27e12) == pytest.approx(floor_us, abs=0.05)


# ------------------------------------------------------------------ data and accuracy

def test_random_fp8_has_no_zeros():
    a = random_fp8((64, 512), generator=torch.Generator().manual_seed(0), device="cpu")
    assert a.dtype == torch.float8_e4m3fn and a.shape == (64, 512)
    assert not (a.float() == 0).any()


def _reference(m=32, n=48, k=256):
    gen = torch.Generator().manual_seed(1)
    a = random_fp8((m, k), generator=gen, device="cpu")
    w = random_fp8((n, k), generator=gen, device="cpu")
    return a.double() @ w.double().t()


def test_accuracy_accepts_bf16_output_rounding():
    ref = _reference()
    assert check_accuracy(ref.to(torch.bfloat16), ref).ok


def _corrupt(kind, ref):
    out = ref.to(torch.bfloat16).clone()
    if kind == "garbage":
        return torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).bfloat16()
    if kind == "zeros":
        return torch.zeros_like(out)
    if kind == "nan":
        out[3, 5] = float("nan")
        return out
    if kind == "one-tile-unwritten":
        out[:16, :16] = 0
        return out
    if kind == "wrong-shape":
        return out[:, :-1]
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["garbage", "zeros", "nan", "one-tile-unwritten",
                                  "wrong-shape"])
def test_accuracy_rejects(kind):
    ref = _reference()
    result = check_accuracy(_corrupt(kind, ref), ref)
    assert not result.ok and result.reason


# ------------------------------------------------------------------ one cell

def _fake_timer(us):
    return lambda fn: (fn(), us)[1]


def _cell_inputs(det_out=None, timed_out=None, vendor_out=None):
    ref = _reference()
    good = ref.to(torch.bfloat16)
    det = det_out if det_out is not None else good
    timed = timed_out if timed_out is not None else det
    vendors = {REFERENCE_VENDOR: lambda: good}
    if vendor_out is not None:
        vendors["other_vendor"] = lambda: vendor_out
    return dict(det_checked=lambda: det, det_timed=lambda: timed, vendors=vendors)


def test_measure_cell_times_every_provider_in_every_mode():
    timers = {"warm": _fake_timer(3.0), "flush": _fake_timer(6.0)}
    cells = measure_cell(SMALL, 32, det_config={"block_m": 64}, timers=timers, floor_us=2.0,
                         **_cell_inputs(vendor_out=_reference().to(torch.bfloat16)))
    assert set(cells) == {"warm", "flush"}
    assert cells["flush"].det_us == 6.0
    assert cells["flush"].vendor_us == {REFERENCE_VENDOR: 6.0, "other_vendor": 6.0}
    assert cells["warm"].ratio == 1.0 and cells["warm"].floor_ratio == 1.5
    assert not cells["warm"].errors


def test_measure_cell_refuses_a_time_for_a_wrong_result():
    ref = _reference()
    cells = measure_cell(SMALL, 32, det_config=None, timers={"warm": _fake_timer(1.0)},
                         floor_us=None, **_cell_inputs(det_out=_corrupt("garbage", ref)))
    cell = cells["warm"]
    assert cell.det_us is None and cell.ratio is None
    assert any("wrong result" in e for e in cell.errors)


def test_measure_cell_flags_a_timed_launch_that_differs_from_the_checked_one():
    good = _reference().to(torch.bfloat16)
    cells = measure_cell(SMALL, 32, det_config=None, timers={"warm": _fake_timer(1.0)},
                         floor_us=None, **_cell_inputs(timed_out=good + 1))
    assert cells["warm"].det_us is None
    assert any("timed launch" in e for e in cells["warm"].errors)


def test_measure_cell_records_a_wrong_vendor_without_failing_the_cell():
    ref = _reference()
    cells = measure_cell(SMALL, 32, det_config=None, timers={"warm": _fake_timer(1.0)},
                         floor_us=None, **_cell_inputs(vendor_out=_corrupt("zeros", ref)))
    cell = cells["warm"]
    assert not cell.errors and cell.det_us == 1.0
    assert "other_vendor" in cell.vendor_errors and cell.vendor_us["other_vendor"] is None


def test_measure_cell_reference_failure_is_an_error():
    def broken():
        raise RuntimeError("cuBLASLt says no")
    inputs = _cell_inputs()
    inputs["vendors"] = {REFERENCE_VENDOR: broken}
    cells = measure_cell(SMALL, 32, det_config=None, timers={"warm": _fake_timer(1.0)},
                         floor_us=None, **inputs)
    assert any("cuBLASLt says no" in e for e in cells["warm"].errors)
    assert cells["warm"].det_us is None


# ------------------------------------------------------------------ summaries and reports

def test_summary_geomean_and_worst_cell():
    cells = [_cell(m=1, det=10, torch_us=5), _cell(m=8, det=5, torch_us=10),
             _cell(m=32, det=4, torch_us=4)]
    s = summarize("warm", cells)
    assert s.geomean_ratio == pytest.approx(1.0)
    assert (s.worst_ratio, s.worst_m, s.worst_shape) == (2.0, 1, "small")


def test_summary_reports_the_worst_small_m_floor_ratio():
    """The floor criterion covers M <= FLOOR_GATE_MAX_M only; larger M are compute-bound."""
    cells = [_cell(m=1, det=10, torch_us=5, floor=4.0), _cell(m=16, det=6, torch_us=5, floor=2.0),
             _cell(m=128, det=40, torch_us=40, floor=4.0)]
    s = summarize("graph", cells)
    assert (s.worst_floor_ratio, s.worst_floor_m) == (3.0, 16)
    assert "3.00x the weight-bytes floor" in s.line()


def test_summary_without_floor_cells_reports_no_floor():
    s = summarize("graph", [_cell(m=512, det=10, torch_us=10)])
    assert s.worst_floor_ratio is None and "floor" not in s.line()


def test_summary_leaves_failed_cells_out_and_counts_them():
    cells = [_cell(m=1, det=6, torch_us=5), _cell(m=8, det=None, errors=["wrong result"])]
    s = summarize("warm", cells)
    assert (s.timed_cells, s.failed_cells) == (1, 1)
    assert s.geomean_ratio == pytest.approx(1.2)
    assert "FAILED" in s.line()


def test_table_has_a_row_per_cell_and_the_summary_last():
    config = dict(block_m=64, block_n=128, block_k=128, split_k=2, num_warps=4, num_stages=4,
                  use_workspace=True, use_tma=False)
    cells = [_cell(m=1, det=10, torch_us=5, config=config, floor=4.0),
             _cell(m=2048, det=5, torch_us=10)]
    lines = format_mode_table("warm", cells).splitlines()
    assert lines[0].startswith("mode warm")
    assert "det us" in lines[1] and "torch us" in lines[1] and "floor x" in lines[1]
    assert "bm64 bn128 bk128 sk2 w4 s4 ws" in lines[3] and " 2.50 " in lines[3]
    assert lines[-1].startswith("[warm] geometric mean") and "worst 2.000" in lines[-1]


def test_table_marks_a_wrong_cell_and_prints_its_error():
    text = format_mode_table("flush", [_cell(det=None, errors=["wrong result vs x"])])
    assert "WRONG" in text and "ERROR small M=1: wrong result vs x" in text


def _run(cells):
    return BenchRun(shapes=[SMALL], ms=[1, 8], modes=["warm"],
                    vendors={REFERENCE_VENDOR: "cuBLASLt"}, policy_source="sm90.json",
                    policy_family="sm90", copy_bandwidth=4.27e12, settings={},
                    cells={"warm": cells}, environment={"machine": "test"})


def test_markdown_has_a_ratio_grid_per_mode():
    md = format_markdown(_run([_cell(m=1, det=10, torch_us=5), _cell(m=8, det=5, torch_us=5)]))
    assert "| shape (N x K) | M=1 | M=8 |" in md
    assert "| small 256x512 | 2.00 | 1.00 |" in md


def test_json_payload_records_cells_summary_and_ok():
    payload = _run([_cell(m=1, det=10, torch_us=5)]).to_json()
    json.dumps(payload)
    mode = payload["modes"]["warm"]
    assert payload["ok"] is True and mode["summary"]["geomean_ratio"] == 2.0
    assert mode["cells"][0]["ratio_vs_torch_scaled_mm"] == 2.0


@pytest.mark.parametrize("max_geomean,max_cell,failures", [
    (None, None, 0), (2.5, None, 0), (1.5, None, 1), (None, 1.9, 1), (1.0, 1.0, 2)],
    ids=["no-gate", "geomean-ok", "geomean-over", "cell-over", "both-over"])
def test_speed_gate(max_geomean, max_cell, failures):
    summaries = {"warm": summarize("warm", [_cell(m=1, det=10, torch_us=5),
                                            _cell(m=8, det=6, torch_us=5)])}
    assert len(gate_failures(summaries, max_geomean=max_geomean, max_cell=max_cell)) == failures


@pytest.mark.parametrize("max_floor_ratio,failures", [(None, 0), (2.0, 0), (1.3, 1)],
                         ids=["no-gate", "within", "above"])
def test_floor_gate(max_floor_ratio, failures):
    summaries = {"graph": summarize("graph", [_cell(m=1, det=8, torch_us=8, floor=5.0),
                                              _cell(m=8, det=6, torch_us=6, floor=5.0)])}
    found = gate_failures(summaries, max_geomean=None, max_cell=None,
                          max_floor_ratio=max_floor_ratio)
    assert len(found) == failures
    assert all("small M=1 takes 1.60x the weight-bytes floor" in f for f in found)


def test_markdown_states_the_launch_floor_of_each_mode():
    run = _run([_cell(m=1, det=10, torch_us=5)])
    run.launch_floor_us = {"warm": 2.25}
    assert "An empty kernel takes 2.25 us per call" in format_markdown(run)
    assert run.to_json()["launch_floor_us"] == {"warm": 2.25}


# ------------------------------------------------------------------ CLI

@pytest.fixture
def no_gpu():
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU path; this machine has a CUDA GPU")


def test_bench_gemm_without_gpu_exits_2_with_a_clear_message(no_gpu, capsys):
    assert main(["bench", "gemm", "--shapes", "qwen3-8b"]) == 2
    assert NO_GPU_MESSAGE in capsys.readouterr().err


def test_bench_gemm_without_gpu_process_exit_code(no_gpu):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-m", "det_suite", "bench", "gemm", "--json",
                           "unused.json"], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 2 and NO_GPU_MESSAGE in proc.stderr
    assert not (REPO_ROOT / "unused.json").exists()


def test_bench_gemm_rejects_a_bad_shape_before_anything_else(capsys):
    assert main(["bench", "gemm", "--shapes", "4096"]) == 2
    assert "shape '4096'" in capsys.readouterr().err


def test_bench_gemm_mode_is_repeatable():
    args = build_parser().parse_args(["bench", "gemm", "--mode", "warm", "--mode", "graph"])
    assert args.mode == ["warm", "graph"]


def test_bench_gemm_rejects_an_unknown_mode():
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", "gemm", "--mode", "cold"])
    assert exc.value.code == 2


@pytest.mark.parametrize("spec,expected", [
    ("block_m=64,block_n=128,block_k=128",
     dict(block_m=64, block_n=128, block_k=128, num_warps=4, num_stages=3, split_k=1,
          group_m=8, use_workspace=False, use_tma=False, fused_fixup=True, use_pdl=False,
          swap_ab=False, prefetch_k=0, warp_specialized=False)),
    ('{"block_m": 64, "block_n": 64, "block_k": 128, "split_k": 2, "use_workspace": true}',
     dict(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=3, split_k=2,
          group_m=8, use_workspace=True, use_tma=False, fused_fixup=True, use_pdl=False,
          swap_ab=False, prefetch_k=0, warp_specialized=False)),
    ("block_m=64,block_n=64,block_k=128,split_k=2,use_workspace=1,fused_fixup=0,use_tma=1",
     dict(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=3, split_k=2,
          group_m=8, use_workspace=True, use_tma=True, fused_fixup=False, use_pdl=False,
          swap_ab=False, prefetch_k=0, warp_specialized=False)),
    ("block_m=16,block_n=64,block_k=128,use_tma=1,swap_ab=1,use_pdl=1",
     dict(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=3, split_k=1,
          group_m=8, use_workspace=False, use_tma=True, fused_fixup=True, use_pdl=True,
          swap_ab=True, prefetch_k=0, warp_specialized=False)),
], ids=["key-value", "json", "flags", "swap-pdl"])
def test_parse_config_spec(spec, expected):
    assert parse_config_spec(spec) == expected


@pytest.mark.parametrize("spec", ["block_m=64", "block_m=64,block_n=64,block_k=128,bogus=1",
                                  "block_m"], ids=["missing-fields", "unknown-field",
                                                   "not-key-value"])
def test_parse_config_spec_rejects(spec):
    with pytest.raises(ValueError, match="--config"):
        parse_config_spec(spec)


def test_config_policy_serves_the_pinned_config_for_every_shape_and_m():
    fields = parse_config_spec("block_m=64,block_n=128,block_k=256,split_k=2,use_workspace=1")
    policy = config_policy(fields, "sm90")
    configs = {policy.select(m, n, k) for m in (1, 8192) for n, k in ((4096, 4096),
                                                                      (24576, 4096))}
    assert len(configs) == 1
    assert next(iter(configs)).use_workspace and next(iter(configs)).split_k == 2


def test_every_tile_parameter_can_be_pinned():
    """The pinned config takes the tile's parameters from the tile dataclass, so one the
    table gained later (here prefetch_k) reaches the launch config without a list here."""
    fields = parse_config_spec("block_m=16,block_n=64,block_k=256,use_tma=1,use_pdl=1,"
                               "prefetch_k=1024")
    assert config_policy(fields, "sm90").select(1, 4096, 4096).prefetch_k == 1024


# ------------------------------------------------------------------ library entry point

def test_command_defaults_are_the_settings_defaults():
    """`det-suite bench gemm` with no options asks for exactly GemmBenchSettings()."""
    args = build_parser().parse_args(["bench", "gemm"])
    assert settings_from_args(args) == GemmBenchSettings()


def test_command_passes_every_option_into_the_settings():
    args = build_parser().parse_args([
        "bench", "gemm", "--shapes", "qwen3-8b", "64,128", "--m", "1", "8", "--mode", "graph",
        "--policy-file", "p.json", "--config", "block_m=64,block_n=64,block_k=128",
        "--vendors", "torch_scaled_mm", "--warmup-ms", "5", "--rep-ms", "20", "--seed", "3",
        "--floor-max-m", "16", "--max-geomean", "1.1", "--max-cell", "1.3",
        "--max-floor-ratio", "1.5", "--gate-mode", "graph"])
    assert settings_from_args(args) == GemmBenchSettings(
        shapes=("qwen3-8b", "64,128"), ms=(1, 8), modes=["graph"], policy_file="p.json",
        config="block_m=64,block_n=64,block_k=128", vendors=["torch_scaled_mm"],
        warmup_ms=5.0, rep_ms=20.0, seed=3, floor_max_m=16, max_geomean=1.1, max_cell=1.3,
        max_floor_ratio=1.5, gate_modes=["graph"])


def test_plan_expands_the_settings():
    plan = plan_gemm_bench(GemmBenchSettings(shapes=["64,128", "64x128"], ms=[8, 1, 8],
                                             modes=["graph", "warm", "graph"],
                                             config={"block_m": 64, "block_n": 64,
                                                     "block_k": 128}))
    assert [s.name for s in plan.shapes] == ["64x128"] and plan.ms == [1, 8]
    assert plan.modes == ["graph", "warm"] and plan.gate_modes == ["graph", "warm"]
    assert plan.config_fields == parse_config_spec("block_m=64,block_n=64,block_k=128")


@pytest.mark.parametrize("settings,message", [
    (GemmBenchSettings(shapes=["4096"]), "shape '4096'"),
    (GemmBenchSettings(ms=[0]), ">= 1"),
    (GemmBenchSettings(config="block_m=64"), "--config: missing"),
    (GemmBenchSettings(config={"block_m": 64, "block_n": 64, "block_k": 128, "bogus": 1}),
     "--config: unknown"),
    (GemmBenchSettings(modes=["cold"]), "mode 'cold' is not one of"),
    (GemmBenchSettings(modes=["flush"], gate_modes=["graph"]),
     "--gate-mode graph is not among the modes run"),
], ids=["shape", "m", "config-text", "config-fields", "mode", "gate-mode"])
def test_bench_gemm_refuses_bad_settings_before_needing_a_gpu(settings, message):
    with pytest.raises(BenchUsageError, match=message):
        bench_gemm(settings)


def test_bench_gemm_without_gpu_raises_gpu_required(no_gpu):
    with pytest.raises(GpuRequired, match=NO_GPU_MESSAGE):
        bench_gemm(GemmBenchSettings())


@pytest.fixture
def fake_gpu_run(monkeypatch):
    """bench_gemm with the GPU run replaced by canned cells (the first M of every shape
    `det` us, torch 5 us), so the command's whole path runs on CPU."""
    import det_suite.bench.gemm.job as job
    import det_suite.bench.timing as timing
    import det_suite.reports.environment as environment

    calls = {}

    def fake_run(shapes, ms, modes, **kwargs):
        calls.update(shapes=shapes, ms=ms, modes=modes, **kwargs)
        cells = {mode: [_cell(mode, shape, m, det=calls["det"], torch_us=5.0)
                        for shape in shapes for m in ms] for mode in modes}
        if calls.get("wrong"):
            cells[modes[0]][0].errors = ["wrong result vs torch_scaled_mm"]
        return BenchRun(shapes=list(shapes), ms=list(ms), modes=list(modes),
                        vendors={REFERENCE_VENDOR: "cuBLASLt"}, policy_source="test",
                        policy_family="sm90", copy_bandwidth=4.27e12, settings={},
                        cells=cells)

    monkeypatch.setattr(timing, "require_gpu", lambda what: None)
    monkeypatch.setattr(job, "run_gemm_bench", fake_run)
    monkeypatch.setattr(environment, "environment", lambda: {"machine": "test"})
    calls["det"] = 5.0
    return calls


def test_bench_gemm_returns_the_run_gate_and_payload(fake_gpu_run):
    fake_gpu_run["det"] = 7.0
    result = bench_gemm(GemmBenchSettings(shapes=["64,128"], ms=[1, 8], modes=["graph"],
                                          max_cell=1.3, seed=3))
    assert fake_gpu_run["modes"] == ["graph"] and fake_gpu_run["seed"] == 3
    assert fake_gpu_run["policy"] is None  # the shipped table of this family
    assert not result.failed and not result.ok
    assert result.gate_failures == ["[graph] worst cell 1.400 at 64x128 M=1 > 1.3"]
    assert result.payload["gate"]["failures"] == result.gate_failures
    assert result.payload["environment"] == {"machine": "test"}
    assert result.tables()[0].startswith("mode graph")
    assert "| 64x128 64x128 | 1.40 | 1.40 |" in result.markdown()


def test_bench_gemm_pins_a_config_as_a_one_entry_policy(fake_gpu_run):
    bench_gemm(GemmBenchSettings(shapes=["64,128"], ms=[1],
                                 config="block_m=64,block_n=64,block_k=128,split_k=2"))
    policy = fake_gpu_run["policy"]
    assert policy.select(1, 4096, 4096).split_k == 2 and policy.source.startswith("--config")


def test_bench_gemm_reports_an_unreadable_policy_file(fake_gpu_run, tmp_path):
    with pytest.raises(BenchUsageError, match="cannot load the policy"):
        bench_gemm(GemmBenchSettings(policy_file=str(tmp_path / "missing.json")))


@pytest.mark.parametrize("det,wrong,code", [(5.0, False, 0), (8.0, False, 3), (5.0, True, 1)],
                         ids=["ok", "gate", "wrong-result"])
def test_bench_gemm_command_prints_writes_and_exits(fake_gpu_run, tmp_path, capsys, det,
                                                    wrong, code):
    fake_gpu_run.update(det=det, wrong=wrong)
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    assert main(["bench", "gemm", "--shapes", "64,128", "--m", "1", "--mode", "graph",
                 "--max-geomean", "1.5", "--json", str(out_json),
                 "--markdown", str(out_md)]) == code
    captured = capsys.readouterr()
    assert captured.out.startswith("mode graph")
    payload = json.loads(out_json.read_text())
    assert payload["ok"] is (not wrong) and payload["gate"]["modes"] == ["graph"]
    assert "| shape (N x K) | M=1 |" in out_md.read_text()
    assert ("GATE: [graph] geometric mean" in captured.err) is (code == 3)
    assert ("FAILED: det-suite produced wrong results" in captured.err) is wrong


# ------------------------------------------------------------------ GPU

@pytest.mark.gpu
@pytest.mark.perf
def test_gpu_bench_small_shape_every_mode():
    from det_suite.bench.gemm import run_gemm_bench

    run = run_gemm_bench([GemmShape("small", 1024, 1024)], [1, 128], ["warm", "flush", "graph"],
                         warmup_ms=5, rep_ms=20, progress=print)
    assert not run.failed, [c.errors for cells in run.cells.values() for c in cells]
    for mode, cells in run.cells.items():
        for cell in cells:
            assert cell.det_us > 0 and cell.torch_us > 0, (mode, cell.m)
            assert cell.config is not None
        print(format_mode_table(mode, cells))


@pytest.mark.gpu
@pytest.mark.perf
def test_gpu_bench_cli_writes_json_and_markdown(tmp_path):
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    code = main(["bench", "gemm", "--shapes", "1024,1024", "--m", "1", "64", "--mode", "graph",
                 "--rep-ms", "20", "--warmup-ms", "5", "--json", str(out_json),
                 "--markdown", str(out_md)])
    assert code == 0
    payload = json.loads(out_json.read_text())
    assert payload["ok"] and payload["environment"]["gpu"]["capability"]
    assert payload["hbm_copy_bandwidth_bytes_per_s"] > 1e11
    assert payload["launch_floor_us"]["graph"] > 0
    assert "| shape (N x K) |" in out_md.read_text()


@pytest.mark.gpu
@pytest.mark.perf
@pytest.mark.parametrize("mode", ["warm", "flush", "graph"])
def test_gpu_timer_orders_a_small_and_a_large_copy(mode):
    from det_suite.bench.timing import make_timer

    small = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    large = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    small_dst, large_dst = torch.empty_like(small), torch.empty_like(large)
    timer = make_timer(mode, warmup_ms=5, rep_ms=20)
    t_small = timer(lambda: small_dst.copy_(small))
    t_large = timer(lambda: large_dst.copy_(large))
    assert 0 < t_small < t_large


def test_gate_mode_not_run_is_a_usage_error(capsys):
    code = main(["bench", "gemm", "--mode", "flush", "--gate-mode", "graph",
                 "--max-cell", "1.3"])
    assert code == 2
    assert "--gate-mode graph is not among the modes run (flush)" in capsys.readouterr().err
