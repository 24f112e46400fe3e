"""bench e2e's report says what each arm runs and lists every cell where the control (arm
A) is slower than another arm, with the known cause; none when it never is."""

from det_suite.bench.e2e.arms import MODES, mode_kernels
from det_suite.bench.e2e.render import kernel_lines, slower_control_lines

ARMS = [{"name": "stock", "mode": "fast-stock"}, {"name": "det", "mode": "det"},
        {"name": "control", "mode": "stock"}]
LETTERS = {"stock": "A", "det": "B", "control": "C"}


def _payload(det_ratios, control_ratios=None):
    def ratios(values):
        return {m: {"ratio": r, "ci95": [r, r]} for m, r in values.items()}
    control_ratios = control_ratios or {m: 2.0 for m in det_ratios}
    return {"plan": {"arms": ARMS}, "letters": LETTERS,
            "cells": [{"prefix": 8192, "batch": 1,
                       "ratios": {"det": ratios(det_ratios),
                                  "control": ratios(control_ratios)}}]}


def test_every_mode_names_its_kernels():
    assert set(MODES) == {"det", "fast-stock", "stock", "m-dependent"}
    text = mode_kernels("fast-stock")
    assert "torch._scaled_mm" in text and "split-KV" in text and "F.linear" in text
    lines = kernel_lines(_payload({"e2e_ms": 1.0}))
    assert [line.split(":")[0] for line in lines] == ["- A = stock", "- B = det", "- C = control"]


def test_cells_where_the_control_is_slower_are_listed_with_a_cause():
    lines = slower_control_lines(_payload({"e2e_ms": 0.97, "prefill_ms": 1.2,
                                           "decode_ms_per_step": 0.9}))
    assert len(lines) == 2
    assert lines[0].startswith("- end to end, prefix 8192 / batch 1: det / stock = 0.970")
    assert "decode step" in lines[1] and "known cause" in lines[1]


def test_no_slower_cell_says_so():
    lines = slower_control_lines(_payload({"e2e_ms": 1.02, "prefill_ms": 1.2,
                                           "decode_ms_per_step": 1.0}))
    assert lines == ["None: stock is as fast as or faster than every other arm in every cell."]
