"""tools/promotion_interval_sweep.py: its hand-promoted GEMM gives the shipped bits at the
shipped interval, keeps one schedule per interval across M and tiles (swapped, plain, split-K
through the workspace, persistent, warp-specialised), and its comparison sees a changed
interval.

The sweep times the arms and measures their error on a GPU; here (Triton's interpreter, the
SM90 table) it runs the same launches at small shapes, so what can be checked is the bits.
"""

from pathlib import Path

import pytest
import torch

from det_suite.bench.sweep_cli import load_tool

TOOL = Path(__file__).resolve().parents[2] / "tools" / "promotion_interval_sweep.py"


@pytest.fixture(scope="module")
def sweep():
    return load_tool(TOOL)


@pytest.fixture(scope="module", params=["64x640", "128x512-split2"])
def shape_result(request, sweep, kernel_device):
    n, k = sweep.CPU_SHAPES[request.param_index]
    result = sweep.measure_shape(n, k, [1, 3, 40], [256, 512], device=torch.device(kernel_device),
                                 sm_count=2, split_override=sweep.CPU_SPLIT.get((n, k)),
                                 small_arms=True, extra_splits=(2,), log=lambda _line: None)
    print(f"{n}x{k}: {result['compared']} compared, {result['differ']} differ")
    return result


def test_every_arm_ran(shape_result):
    failed = [row for cell in shape_result["cells"] for row in cell["arms"] if "error" in row]
    assert not failed


def test_the_arms_at_the_shipped_interval_give_the_shipped_bits(shape_result):
    rows = [row for cell in shape_result["cells"] for row in cell["arms"]
            if "equals_shipped" in row]
    assert rows
    assert all(row["equals_shipped"] for row in rows), [r["arm"] for r in rows
                                                        if not r["equals_shipped"]]


def test_each_interval_keeps_one_schedule_across_rows_and_tiles(shape_result):
    assert shape_result["compared"] > 0
    assert shape_result["differ"] == 0


def test_the_control_interval_is_flagged(shape_result):
    assert shape_result["control_flagged"]


@pytest.mark.parametrize("k", [256, 4096, 4160, 12288], ids=lambda k: f"K{k}")
def test_the_shipped_interval_chunks_k_as_the_shipped_tiles_do(sweep, k):
    from det_suite.policy import LaunchConfig

    shipped = LaunchConfig(block_m=128, block_n=128, block_k=256, num_warps=8, num_stages=3,
                           split_k=2, group_m=8, use_workspace=False, promote_k=256)
    arm = sweep.Arm(128, 128, 128, 256, 2, 8, 3)
    assert arm.k_chunk(k) == shipped.k_chunk(k)


@pytest.mark.parametrize("fields, message", [
    (dict(block_k=256, promote_k=128), "promote_k must be a multiple of block_k"),
    (dict(block_k=128, promote_k=256, workspace=True, persistent=True), "workspace must be off"),
], ids=["interval-below-block-k", "persistent-with-workspace"])
def test_an_arm_that_cannot_keep_the_schedule_is_refused(sweep, fields, message):
    base = dict(block_m=64, block_n=64, split_k=2, num_warps=4, num_stages=2)
    with pytest.raises(ValueError, match=message):
        sweep.Arm(**base, **fields)


@pytest.mark.parametrize("argv, message", [
    (["out", "--promote", "192"], "multiples of 128"),
    (["out", "--ms", "0"], "integers >= 1"),
    (["out", "--shapes", "4096x"], "expected NxK shapes"),
    (["out", "--shapes", "4096x4100"], "positive multiples of 16"),
], ids=["promote-not-128-multiple", "zero-rows", "shape-without-k", "k-not-16-multiple"])
def test_the_command_line_refuses_what_it_cannot_run(sweep, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(argv + ["--device", "cpu"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_each_interval_stays_near_the_exact_product(shape_result, sweep, kernel_device):
    if kernel_device != "cpu":
        pytest.skip("on a GPU the sweep's operands round in the MMA by the outputs' size; "
                    "the GPU's accuracy measure is the probe's error beside cuBLAS's")
    assert shape_result["worst_exact_error"] <= sweep.INTERPRETER_EXACT_TOLERANCE


def _timed_cell(m, shipped_us, torch_us, arms, errors):
    return {"m": m, "torch_us": torch_us, "shipped_us": shipped_us, "errors": errors,
            "arms": [{"arm": tag, "us": us, "config": {"promote_k": p, "split_k": sk}}
                     for tag, p, sk, us in arms]}


def test_a_timed_run_is_summarised_per_schedule(sweep):
    # The GPU-only half of the report, on made-up times: the best arm per (interval, split)
    # per cell, geomean and worst against torch._scaled_mm, the worst error ratio.
    shape = {"n": 4096, "k": 4096, "cells": [
        _timed_cell(1, 6.0, 5.0, [("a", 256, 1, 6.0), ("b", 256, 1, 5.0), ("c", 256, 2, 4.0)],
                    {"p256/sk1": {"ratio": 1.0}, "p256/sk2": {"ratio": 1.01}}),
        _timed_cell(2048, 110.0, 100.0, [("d", 256, 1, 120.0), ("e", 512, 1, 90.0)],
                    {"p256/sk1": {"ratio": 1.002}, "p512/sk1": {"ratio": 1.2}}),
    ]}
    summary = sweep.summarize([shape])
    assert summary["shipped_geomean"] == pytest.approx((1.2 * 1.1) ** 0.5)
    p256 = summary["schedules"]["p256/sk1"]
    assert p256["cells"] == 2
    assert p256["geomean"] == pytest.approx((1.0 * 1.2) ** 0.5)
    assert p256["worst_cell"] == "4096x4096 m=2048"
    assert p256["worst_error_ratio"] == pytest.approx(1.002)
    assert summary["schedules"]["p256/sk2"]["cells"] == 1
    assert summary["schedules"]["p512/sk1"]["worst_error_ratio"] == pytest.approx(1.2)
    payload = {"device": "test", "compared": 3, "differ": 0, "shipped_equal": 2,
               "shipped_compared": 2, "summary": summary, "shapes": [shape],
               "control_flagged": True}
    markdown = sweep._markdown(payload)
    assert "| p512/sk1 | 0.900 |" in markdown
    assert "| 4096x4096 | 1 | 5.0 | 6.0 | 5.0 b; 4.0 c |" in markdown
    line = sweep._cell_line({"n": 4096, "k": 4096, **shape["cells"][0]})
    assert "p256/sk2 4.0 (c)" in line


def test_a_cpu_run_writes_its_report_and_passes(sweep, kernel_device, tmp_path, capsys):
    if kernel_device != "cpu":
        pytest.skip("the --device cpu run needs Triton's interpreter, which a GPU session "
                    "does not start; the GPU runs the sweep itself on the H200")
    assert sweep.main([str(tmp_path), "--device", "cpu", "--decode-splits", "2"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["promotion_interval.cells.jsonl", "promotion_interval.json",
                     "promotion_interval.md"]
    assert "bit checks only" in (tmp_path / "promotion_interval.md").read_text()


def test_the_timed_path_measures_every_arm_and_the_error_per_schedule(sweep, kernel_device):
    # The GPU run's measuring half with a stand-in timer (each callable is called once):
    # times for torch._scaled_mm, the shipped launch and every arm, and per (interval,
    # split) the fp64 error beside torch._scaled_mm's.
    if kernel_device != "cpu":
        pytest.skip("the GPU session times the real sweep on the H200")
    calls = []

    def timer(fn):
        fn()
        calls.append(fn)
        return float(len(calls))

    result = sweep.measure_shape(64, 640, [1, 3], [256, 512], device=torch.device("cpu"),
                                 sm_count=2, small_arms=True, timer=timer,
                                 log=lambda _line: None)
    for cell in result["cells"]:
        assert cell["torch_us"] > 0 and cell["shipped_us"] > 0
        assert all("us" in row for row in cell["arms"])
        assert set(cell["errors"]) == {"p256/sk1", "p512/sk1"}
        assert all(err["ratio"] > 0 for err in cell["errors"].values())
    assert len(calls) == sum(2 + len(cell["arms"]) for cell in result["cells"])
    assert sweep.summarize([result])["schedules"]["p512/sk1"]["cells"] == 2


RECORDED = (Path(__file__).resolve().parents[2] / "docs" / "evidence" / "h100-2026-12-05-k-sweeps"
            / "gemm-named" / "promotion_named" / "promotion_interval.json")


def test_a_recorded_run_is_summarized_again_with_the_same_bits_table(sweep, tmp_path):
    assert sweep.main([str(tmp_path), "--from-json", str(RECORDED)]) == 0
    text = (tmp_path / "promotion_interval.md").read_text()
    # The committed H100 run: the table as shipped, and what its same-bits arms could give.
    assert "| shipped | 0.920 | 0.947 | 1.181 | 1.450 | 1.371 | 1.362 | 1.186 | 1.696 |" in text
    assert "| + persistent / warp-specialised |" in text


@pytest.mark.parametrize("source, message", [
    ("missing.json", "is not a readable promotion_interval.json"),
    ("same-folder", "OUT_DIR must differ"),
], ids=["missing-file", "into-the-recorded-folder"])
def test_summarizing_again_refuses_what_it_cannot_do(sweep, tmp_path, capsys, source, message):
    if source == "same-folder":
        recorded = tmp_path / "promotion_interval.json"
        recorded.write_text(RECORDED.read_text())
    else:
        recorded = tmp_path / source
    assert sweep.main([str(tmp_path), "--from-json", str(recorded)]) == 2
    assert message in capsys.readouterr().err
