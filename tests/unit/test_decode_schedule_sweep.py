"""tools/decode_schedule_sweep.py: its split arms change a GEMM's schedule for every M of a
shape alike (never for decode rows alone), and its step-level check, decode logprobs against
a cold prefill's, holds for the shipped engine and flags a decode-only order.

The sweep times the step on a GPU; here the tables are checked on Qwen3-8B's shapes (plain
Python) and the contract check runs the tiny model on Triton's interpreter.
"""

from pathlib import Path

import pytest

from det_suite.bench.sweep_cli import load_tool
from det_suite.models.catalog import projections

TOOL = Path(__file__).resolve().parents[2] / "tools" / "decode_schedule_sweep.py"
H200_SMS = 132
SHAPES = {p.name: (p.n, p.k) for p in projections("qwen3-8b")}
ROWS = (1, 8, 16, 64, 128, 512, 2048, 8192)


@pytest.fixture(scope="module")
def sweep():
    return load_tool(TOOL)


@pytest.mark.parametrize("arm, split", [
    ("shipped", set()), ("split-o", {"o"}), ("split-few", {"qkv", "o"}),
    ("segment-128", set()),
], ids=["shipped", "split-o", "split-few", "segment-only"])
def test_an_arm_splits_the_gemms_its_rule_names(sweep, arm, split):
    policy = sweep.arm_policy(arm, H200_SMS)
    shipped = sweep.arm_policy("shipped", H200_SMS)
    for name, (n, k) in SHAPES.items():
        changed = policy.select(1, n, k).split_k != shipped.select(1, n, k).split_k
        assert changed == (name in split), name


@pytest.mark.parametrize("name", ["o", "qkv"])
def test_a_split_is_one_schedule_for_every_row_count(sweep, name):
    n, k = SHAPES[name]
    policy = sweep.arm_policy("split-few", H200_SMS)
    schedules = {policy.select(m, n, k).reduction_schedule(k) for m in ROWS}
    assert schedules == {(k // 2, 2, k)}
    decode, prefill = policy.select(1, n, k), policy.select(2048, n, k)
    assert decode.use_workspace and not prefill.use_workspace


def test_a_split_names_the_shapes_it_served(sweep):
    policy = sweep.arm_policy("split-o", H200_SMS)
    policy.select(1, *SHAPES["o"])
    policy.select(1, *SHAPES["gate_up"])
    assert policy.split_shapes == {"{}x{}".format(*SHAPES["o"])}


def test_a_k_of_one_tile_is_never_split(sweep):
    policy = sweep.arm_policy("split-few", H200_SMS)
    assert policy.select(1, 512, 64).split_k == 1
    assert not policy.split_shapes


@pytest.mark.parametrize("arm, context, expected", [
    ("segment-64", 40, False), ("segment-64", 80, True), ("split-o", 80, False),
    ("shipped", 10, True),
], ids=["segment-longer-than-context", "segment-cuts-context", "nothing-to-split", "shipped"])
def test_an_arm_that_changed_nothing_is_not_applied(sweep, arm, context, expected):
    policy = sweep.arm_policy(arm, H200_SMS)
    assert sweep.applied(arm, policy, context) is expected


@pytest.fixture(scope="module")
def cpu_run(sweep, kernel_device, tmp_path_factory):
    if kernel_device != "cpu":
        pytest.skip("the --device cpu run needs Triton's interpreter; a GPU session runs the "
                    "sweep itself on the H200")
    out = tmp_path_factory.mktemp("decode_schedule")
    status = sweep.main([str(out), "--device", "cpu", "--arms", "shipped,fold-attention"])
    import json

    return status, json.loads((out / "decode_schedule.json").read_text()), out


def test_the_shipped_engine_decodes_as_it_prefills(cpu_run):
    _status, result, _out = cpu_run
    shipped = next(r for r in result["arms"] if r["arm"] == "shipped")
    print(shipped["check"])
    assert shipped["check"]["equal"] and shipped["check"]["compared"] >= 2


def test_the_folded_attention_ran_and_keeps_the_contract(cpu_run):
    _status, result, _out = cpu_run
    fold = next(r for r in result["arms"] if r["arm"] == "fold-attention")
    print(fold["fold_launches"], fold["check"])
    assert fold["applied"] and fold["fold_launches"] > 0
    assert fold["check"]["equal"] and fold["check"]["compared"] >= 2


def test_every_finished_arm_is_kept_on_disk(cpu_run):
    _status, result, out = cpu_run
    import json

    partial = json.loads((out / "decode_schedule.partial.json").read_text())
    assert [r["arm"] for r in partial["arms"]] == [r["arm"] for r in result["arms"]]


def test_a_decode_only_tile_order_is_flagged(cpu_run, sweep):
    status, result, _out = cpu_run
    control = next(r for r in result["arms"] if r["arm"] == sweep.CONTROL)
    assert control["applied"] and not control["check"]["equal"]
    assert result["control_flagged"] and status == 0


@pytest.mark.parametrize("argv, message", [
    (["out", "--arms", "shipped,fastest"], "unknown fastest"),
    (["out", "--prefix", "0"], "integers >= 1"),
], ids=["unknown-arm", "zero-prefix"])
def test_the_command_line_refuses_what_it_cannot_run(sweep, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(argv + ["--device", "cpu"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_timed_run_reads_as_a_table(sweep):
    # The GPU-only half of the report, on made-up times.
    cell = {"prefix": 128, "replay_ms": 3.2, "step_ms": 3.3, "prefill_ms": 12.5}
    rows = [{"arm": "shipped", "applied": True, "split_shapes": [], "cells": [cell],
             "check": {"equal": True, "ids_equal": True, "compared": 16,
                       "differing_logprobs": 0}},
            {"arm": "split-o", "applied": True, "split_shapes": ["4096x4096"],
             "cells": [{**cell, "replay_ms": 3.0}],
             "check": {"equal": True, "ids_equal": True, "compared": 16,
                       "differing_logprobs": 0}}]
    markdown = sweep._markdown({"device": "test", "model": "m", "arms": rows,
                                "control_flagged": True})
    assert "| shipped | kept (16 logprobs) | 128 | 3.200 | 3.300 | 1.000 | 12.50 |" in markdown
    assert "| split-o | kept (16 logprobs); split 4096x4096 | 128 | 3.000 | 3.300 | 0.938 |" \
        in markdown
