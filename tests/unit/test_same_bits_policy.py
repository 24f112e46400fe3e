"""tools/same_bits_policy.py: what a table could get from a GEMM sweep without changing a bit.
Per cell only the shipped launch and arms that gave its bits (`equals_shipped` True) are
contenders; a class restricts the arms; geomeans by M and overall against torch."""

from pathlib import Path

import pytest

from det_suite.bench.sweep_cli import load_tool

TOOL = Path(__file__).resolve().parents[2] / "tools" / "same_bits_policy.py"


@pytest.fixture(scope="module")
def policy():
    return load_tool(TOOL)


def _cell(m, shipped_us, *arms, torch_us=10.0):
    return {"m": m, "torch_us": torch_us, "shipped_us": shipped_us, "arms": list(arms)}


def _arm(tag, us, equals_shipped=True, block_k=128):
    return {"arm": tag, "us": us, "equals_shipped": equals_shipped,
            "config": {"block_k": block_k}}


@pytest.mark.parametrize("arm, expected", [
    (_arm("fast", 5.0), (5.0, "fast")),
    (_arm("fast-other-bits", 5.0, equals_shipped=False), (10.0, "shipped")),
    ({"arm": "unchecked", "us": 5.0, "config": {}}, (10.0, "shipped")),
    ({"arm": "failed", "equals_shipped": True, "error": "x", "config": {}}, (10.0, "shipped")),
    (_arm("slow", 12.0), (10.0, "shipped")),
], ids=["faster-same-bits", "faster-other-bits", "bits-unchecked", "did-not-run", "slower"])
def test_only_an_arm_with_the_shipped_bits_can_beat_the_shipped_launch(policy, arm, expected):
    assert policy.fastest_same_bits(_cell(128, 10.0, arm)) == expected


def test_a_class_restricts_the_arms_and_never_does_worse_than_shipped(policy):
    cells = [_cell(1, 10.0, _arm("bk128", 5.0)),
             _cell(512, 20.0, _arm("bk256", 10.0, block_k=256), _arm("bk128", 8.0))]
    summary = policy.same_bits_summary(cells, {
        "bk256": lambda row: row["config"]["block_k"] == 256, "any": lambda row: True})
    assert summary["shipped"]["by_m"] == {1: pytest.approx(1.0), 512: pytest.approx(2.0)}
    assert summary["bk256"]["by_m"] == {1: pytest.approx(1.0), 512: pytest.approx(1.0)}
    assert summary["any"]["by_m"] == {1: pytest.approx(0.5), 512: pytest.approx(0.8)}
    assert summary["any"]["worst"] == pytest.approx(0.8)
    assert summary["any"]["wins"] == {"bk128": 2}


def test_untimed_cells_are_left_out(policy):
    summary = policy.same_bits_summary([{"m": 1, "arms": []}], {})
    assert summary["shipped"]["geomean"] is None
    assert policy.markdown_table(summary)[2:] == []


def test_the_markdown_has_a_column_per_m(policy):
    cells = [_cell(1, 10.0), _cell(16, 5.0)]
    lines = policy.markdown_table(policy.same_bits_summary(cells, {}))
    assert lines[0] == "| arms a table may use | M=1 | M=16 | geomean | worst |"
    assert lines[2] == "| shipped | 1.000 | 0.500 | 0.707 | 1.000 |"
