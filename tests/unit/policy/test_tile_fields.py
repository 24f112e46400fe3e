"""One list of tile parameters: `TileParams` is what an m_tile holds, what a launch config
carries from it, and what the table format reads and writes, by field name."""

import json
from dataclasses import fields, replace

import pytest

from det_suite.policy import (M_TILE_KEYS, LaunchConfig, MTile, TileParams, m_tile_json,
                              parse_entry, parse_policy, policy_json)

TILE_PARAMS = {f.name for f in fields(TileParams)}


def _sm90_table(**first_tile):
    """An SM90 table whose first tile sets every tile parameter away from its default."""
    tiles = [{"max_m": 16, "block_m": 16, "num_warps": 4, "num_stages": 4, "use_tma": True,
              "swap_ab": True, "use_pdl": True, "prefetch_k": 1024, "block_n": 64,
              **first_tile},
             {"max_m": None, "block_m": 128, "num_warps": 8, "num_stages": 3}]
    return {"family": "sm90", "expected_mma": "",
            "default": {"block_n": 128, "block_k": 256, "split_k": 1, "group_m": 8,
                        "m_tiles": tiles}}


def test_m_tile_and_launch_config_both_take_every_tile_param():
    assert {f.name for f in fields(MTile)} - TILE_PARAMS == {"max_m", "block_n", "block_k"}
    assert {f.name for f in fields(LaunchConfig)} - TILE_PARAMS \
        == {"block_n", "block_k", "split_k", "group_m", "promote_k", "max_programs"}
    assert set(M_TILE_KEYS) == {f.name for f in fields(MTile)}


def test_a_selected_launch_config_carries_every_param_of_its_tile():
    entry = parse_policy(_sm90_table(), "t.json").default
    tile, config = entry.m_tiles[0], entry.select(1)
    differing = [name for name in TILE_PARAMS if getattr(config, name) != getattr(tile, name)]
    assert differing == []
    # Every default but fused_fixup, use_workspace and warp_specialized (which excludes
    # swap_ab and PDL; its own tile is checked below) is overridden here, so a parameter
    # the selection dropped would show above.
    assert {name for name in TILE_PARAMS
            if getattr(tile, name) == next(f.default for f in fields(TileParams)
                                           if f.name == name)} == {"use_workspace",
                                                                    "fused_fixup",
                                                                    "warp_specialized"}


def test_a_warp_specialized_tile_reaches_its_launch_config():
    table = _sm90_table(block_m=128, num_warps=4, num_stages=3, swap_ab=False, use_pdl=False,
                        prefetch_k=0, block_n=128, warp_specialized=True)
    tile_config = parse_policy(table, "t.json").default.select(1)
    assert tile_config.warp_specialized and tile_config.max_programs == 0


def test_workspace_is_selected_only_where_the_entry_splits_k():
    tile = MTile(max_m=None, block_m=64, num_warps=4, num_stages=3, use_workspace=True)
    raw = {"block_n": 64, "block_k": 128, "split_k": 1, "m_tiles": [m_tile_json(tile)]}
    assert not parse_entry(raw, "t", None, None).select(1).use_workspace
    assert parse_entry({**raw, "split_k": 2}, "t", 4096, 4096).select(1).use_workspace


def test_every_tile_field_round_trips_and_defaults_are_not_written():
    policy = parse_policy(_sm90_table(), "t.json")
    written = policy_json(policy)["default"]["m_tiles"]
    assert written[0] == {"max_m": 16, "block_m": 16, "num_warps": 4, "num_stages": 4,
                          "use_tma": True, "use_pdl": True, "swap_ab": True,
                          "prefetch_k": 1024, "block_n": 64}
    assert written[1] == {"max_m": None, "block_m": 128, "num_warps": 8, "num_stages": 3}
    again = parse_policy(json.loads(json.dumps(policy_json(policy))), "again.json")
    assert again.default.m_tiles == policy.default.m_tiles


def test_an_unknown_m_tile_key_is_rejected_on_one_line():
    """A misspelt parameter would otherwise be dropped silently and the default run."""
    with pytest.raises(ValueError) as caught:
        parse_policy(_sm90_table(prefech_k=2048), "candidate.json")
    message = str(caught.value)
    assert "unknown m_tile key(s) 'prefech_k'" in message and "prefetch_k" in message
    assert message.startswith("candidate.json: default") and "\n" not in message


def test_a_missing_required_m_tile_key_is_malformed():
    raw = _sm90_table()
    del raw["default"]["m_tiles"][1]["num_warps"]
    with pytest.raises(ValueError, match="malformed tile entry.*num_warps"):
        parse_policy(raw, "t.json")


def test_tile_dataclasses_are_keyword_only():
    """Positional construction would silently shift values when a field is added."""
    with pytest.raises(TypeError):
        LaunchConfig(16, 64, 128, 4, 3, 1, 8)
    with pytest.raises(TypeError):
        MTile(None, 64, 4, 3)
    config = LaunchConfig(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=3,
                          split_k=1, group_m=8)
    assert replace(config, prefetch_k=128).prefetch_k == 128
