"""tools/decode_prefetch_sweep.py: its arms are valid tables that change what they say.

The sweep itself times decode steps on a GPU; what the CPU can check is that each arm's
table loads like a shipped one, touches only the tiles its name promises, and that the
tool refuses arguments it cannot run.
"""

import importlib.util
from pathlib import Path

import pytest

from det_suite.policy import L2_LINE_ELEMENTS, shipped_policy

TOOL = Path(__file__).resolve().parents[2] / "tools" / "decode_prefetch_sweep.py"
H200_SMS = 132


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location("det_suite_decode_prefetch_sweep", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _changed(policy):
    """(entry key, max_m) -> (use_pdl, prefetch_k) for every tile that differs from shipped."""
    shipped = shipped_policy("sm90")
    out = {}
    for key, entry in policy.entries.items():
        for tile, before in zip(entry.m_tiles, shipped.entries[key].m_tiles):
            if tile != before:
                out[(entry.key, tile.max_m)] = (tile.use_pdl, tile.prefetch_k)
    return out


def test_the_shipped_arm_is_the_shipped_table(sweep):
    assert _changed(sweep.arm_policy("shipped", H200_SMS)) == {}


def test_the_pdl_arm_prefetches_the_whole_k_of_the_tiles_that_already_had_pdl(sweep):
    changed = _changed(sweep.arm_policy("pf-pdl", H200_SMS))
    assert changed[("6144x4096", 16)] == (True, 4096)
    assert changed[("4096x4096", 16)] == (True, 4096)
    assert ("4096x12288", 16) not in changed and ("24576x4096", 16) not in changed


def test_the_single_wave_arm_adds_the_split_down_projection_at_its_chunk(sweep):
    changed = _changed(sweep.arm_policy("pf-single-wave", H200_SMS))
    assert changed[("4096x12288", 16)] == (True, 6144)  # split 2: each program's 6144 of K
    assert ("24576x4096", 16) not in changed            # 384 programs: not one wave


def test_the_all_decode_arm_caps_the_multi_wave_tiles(sweep):
    changed = _changed(sweep.arm_policy("pf-all-decode", H200_SMS))
    assert changed[("24576x4096", 16)] == (True, sweep.MULTI_WAVE_PREFETCH_K)
    assert all(pf % L2_LINE_ELEMENTS == 0 and pdl for pdl, pf in changed.values())
    assert all(max_m <= 16 for _key, max_m in changed)


def test_an_early_arm_has_its_table_arms_tiles(sweep):
    assert sweep.arm_policy("pf-single-wave+early", H200_SMS) == \
        sweep.arm_policy("pf-single-wave", H200_SMS)


@pytest.mark.parametrize("arms", ["pf-pdl,shipped", "shipped,pf-everything",
                                  "shipped,pf-pdl+late"],
                         ids=["shipped-not-first", "unknown-arm", "unknown-suffix"])
def test_arms_are_checked_before_anything_runs(sweep, tmp_path, arms, capsys):
    with pytest.raises(SystemExit) as info:
        sweep.main([str(tmp_path), "--arms", arms])
    assert info.value.code == 2 and "--arms" in capsys.readouterr().err


def test_the_table_gives_each_cell_its_ratio_to_shipped_and_to_the_floor(sweep):
    result = {"gpu": "H200", "model": "m", "floor_ms": 2.0, "arms": [
        {"arm": "shipped", "same_bits_as_shipped": True,
         "cells": [{"prefix": 128, "step_ms": 3.2, "replay_ms": 3.1}]},
        {"arm": "pf-pdl", "same_bits_as_shipped": False,
         "cells": [{"prefix": 128, "step_ms": 2.8, "replay_ms": 2.7}]}]}
    rows = sweep.render(result).splitlines()
    assert "| shipped | 128 | 3.200 | 3.100 | 1.000 | 1.60 | yes |" in rows
    assert "| pf-pdl | 128 | 2.800 | 2.700 | 0.875 | 1.40 | **no** |" in rows
