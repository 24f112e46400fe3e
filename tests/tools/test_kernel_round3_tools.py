"""tools/kernel_round3_apply.py turns the GPU results into the table decision: on only where
the warp-specialised kernel kept the bits and lost no cell above M = 256;
tools/gpu_kernel_round3.sh stays within its 8-minute budget by construction."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


@pytest.fixture(scope="module")
def apply():
    spec = importlib.util.spec_from_file_location("det_suite_round3_apply",
                                                  TOOLS / "kernel_round3_apply.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _results(cells, origin="named"):
    return {"sets": {"s": [{"n": 4096, "k": 4096, "origin": origin, "cells": cells}]}}


def _cell(m, current, pingpong, same=True):
    return {"m": m, "current": {"us": current},
            "pingpong": {"us": pingpong, "equals_current": same}}


@pytest.mark.parametrize("cells,on", [
    ([_cell(512, 10, 9), _cell(2048, 40, 39)], True),
    ([_cell(512, 10, 9), _cell(2048, 40, 41)], False),          # one cell slower
    ([_cell(512, 10, 9, same=False), _cell(2048, 40, 39)], False),  # other bits
    ([_cell(128, 10, 12), _cell(512, 10, 9)], True),            # M <= 256 is not its class
    ([_cell(128, 10, 9)], False),                               # no cell of its class
], ids=["wins", "one-slower-cell", "bits-differ", "small-m-ignored", "unmeasured"])
def test_entry_turns_on_only_where_it_keeps_the_bits_and_loses_nothing(apply, cells, on):
    (verdict,) = apply.shape_verdicts(_results(cells)).values()
    assert apply.enabled(verdict) is on


def test_script_timeouts_fit_eight_minutes():
    script = (TOOLS / "gpu_kernel_round3.sh").read_text()
    limits = [int(s) for s in re.findall(r"\btimeout (\d+)", script)]
    assert len(limits) == 2 and sum(limits) <= 450, limits
