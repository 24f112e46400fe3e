"""Tile tables: stored as data, chosen by (family, N, K); M picks only among BLOCK_M."""

import json

import pytest

from det_suite.platform.family import family_of_capability
from det_suite.policy import (load_policy_file, m_tile_text, parse_policy, policy_json,
                              shipped_families, shipped_policy, write_policy_file)

SEED_BLOCK_M = {16, 32, 128}


@pytest.mark.parametrize("family", shipped_families())
def test_every_shipped_table_loads(family):
    policy = shipped_policy(family)
    assert policy.family == family
    assert policy.default.m_tiles[-1].max_m is None


@pytest.mark.parametrize("family", ["sm120", "sm89"])
def test_sm12x_and_sm89_ship_the_seed_table(family):
    entry = shipped_policy(family).default
    assert (entry.block_n, entry.block_k, entry.split_k) == (64, 128, 1)
    assert {t.block_m for t in entry.m_tiles} == SEED_BLOCK_M
    assert {t.num_warps for t in entry.m_tiles} == {4}


@pytest.mark.parametrize("m,block_m", [(1, 16), (16, 16), (17, 32), (32, 32), (33, 128),
                                       (8192, 128)])
def test_seed_table_picks_block_m_by_m(m, block_m):
    assert shipped_policy("sm120").select(m, 4096, 4096).block_m == block_m


def test_sm90_table_never_selects_mma_sync_tiles():
    """BLOCK_M 16/32 on the activation side compile to mma.sync k16 on Hopper, 64/128 to
    wgmma (docs/invariance-rule.md); a swapped tile puts >= 64 weight rows on that side instead."""
    policy = shipped_policy("sm90")
    for entry in policy.all_entries():
        for tile in entry.m_tiles:
            mma_rows = (tile.block_n or entry.block_n) if tile.swap_ab else tile.block_m
            assert mma_rows >= 64, (entry.key, tile)


@pytest.mark.parametrize("family", ["sm100", "default"])
def test_unproven_families_use_one_block_m(family):
    for entry in shipped_policy(family).all_entries():
        assert len({t.block_m for t in entry.m_tiles}) == 1


SCHEDULE_MS = (1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1025, 9000)


@pytest.mark.parametrize("family", shipped_families())
def test_reduction_schedule_is_the_same_for_every_m(family):
    policy = shipped_policy(family)
    for entry in policy.all_entries():
        n, k = (entry.n, entry.k) if entry.n is not None else (4096, 4096)
        schedules = {policy.select(m, n, k).reduction_schedule(k) for m in SCHEDULE_MS}
        assert len(schedules) == 1, entry.key


def test_reduction_schedule_check_flags_an_m_dependent_split():
    """Counterpart: the positive control's configs (split-K and BLOCK_K chosen by M) give
    more than one schedule over the same row counts."""
    from det_suite.invariance.providers import control_config

    assert len({control_config(m).reduction_schedule(4096) for m in SCHEDULE_MS}) > 1


@pytest.mark.parametrize("capability,family", [((8, 9), "sm89"), ((9, 0), "sm90"),
                                               ((10, 0), "sm100"), ((12, 0), "sm120"),
                                               ((12, 1), "sm120"), ((8, 0), "default"),
                                               ((7, 5), "default")])
def test_capability_maps_to_family(capability, family):
    assert family_of_capability(*capability) == family


def test_num_stages_override_changes_only_the_pipeline():
    policy = shipped_policy("sm120")
    base = policy.select(40, 4096, 4096)
    two = policy.select(40, 4096, 4096, num_stages=2)
    assert two.num_stages == 2 and two.reduction_schedule(4096) == base.reduction_schedule(4096)


@pytest.mark.parametrize("k,block_k,split_k,chunk", [(4096, 128, 1, 4096), (4096, 128, 3, 1408),
                                                     (80, 128, 1, 128), (12288, 128, 4, 3072)])
def test_k_chunks_are_whole_block_k_tiles(k, block_k, split_k, chunk):
    config = shipped_policy("sm90").select(1, 4096, k)
    from dataclasses import replace
    config = replace(config, block_k=block_k, split_k=split_k)
    assert config.k_chunk(k) == chunk and chunk % block_k == 0
    assert chunk * split_k >= k


def _table(**default_overrides):
    default = {"block_n": 64, "block_k": 128, "m_tiles": [
        {"max_m": 16, "block_m": 16, "num_warps": 4, "num_stages": 3},
        {"max_m": None, "block_m": 128, "num_warps": 4, "num_stages": 3}]}
    default.update(default_overrides)
    return {"family": "sm120", "default": default, "entries": []}


@pytest.mark.parametrize("overrides,match", [
    (dict(block_k=96), "block_k must be a power of two"),
    (dict(block_k=16), "block_k must be >= 32"),
    (dict(m_tiles=[{"max_m": 16, "block_m": 16, "num_warps": 4, "num_stages": 3}]),
     "must end with an unbounded tile"),
    (dict(m_tiles=[{"max_m": None, "block_m": 24, "num_warps": 4, "num_stages": 3}]),
     "block_m 24 must be a power of two"),
    (dict(m_tiles=[{"max_m": None, "block_m": 64, "num_warps": 4, "num_stages": 9}]),
     "num_stages 9 not in"),
    (dict(m_tiles=[{"max_m": None, "block_m": 64}]), "malformed tile entry"),
    (dict(split_k=0), "split_k must be >= 1"),
    (dict(m_tiles=[{"max_m": None, "block_m": 16, "num_warps": 4, "num_stages": 3,
                    "swap_ab": True}]), "swap_ab tiles must set use_tma"),
    (dict(m_tiles=[{"max_m": None, "block_m": 16, "num_warps": 4, "num_stages": 3,
                    "swap_ab": True, "use_tma": True, "block_n": 32}]),
     "swap_ab tiles need block_n >= 64"),
], ids=["block-k-not-pow2", "block-k-too-small", "no-unbounded-tile", "block-m-not-pow2",
        "bad-stages", "missing-fields", "zero-split", "swap-without-tma", "swap-narrow-n"])
def test_malformed_table_is_rejected_with_location(overrides, match):
    with pytest.raises(ValueError, match=match) as info:
        parse_policy(_table(**overrides), "candidate.json")
    assert "candidate.json: default" in str(info.value)


def test_split_k_beyond_k_tiles_is_rejected():
    raw = _table()
    raw["entries"] = [dict(raw["default"], n=64, k=256, split_k=3)]
    with pytest.raises(ValueError, match="entry 64x256: split_k exceeds the number of K tiles"):
        parse_policy(raw, "candidate.json")


def test_unknown_family_is_rejected():
    raw = _table()
    raw["family"] = "sm75"
    with pytest.raises(ValueError, match="'sm75' is not a GPU family"):
        parse_policy(raw, "candidate.json")


def test_policy_file_round_trip(tmp_path):
    path = tmp_path / "table.json"
    raw = _table()
    raw["entries"] = [dict(raw["default"], n=4096, k=12288, split_k=4)]
    path.write_text(json.dumps(raw))
    policy = load_policy_file(path)
    assert policy.select(1, 4096, 12288).split_k == 4
    assert policy.select(1, 4096, 4096).split_k == 1


@pytest.mark.parametrize("family,flag,match", [
    ("sm89", "use_pdl", "use_pdl needs SM90"),
    ("sm120", "swap_ab", "swap_ab is for families sm90"),
    ("sm100", "swap_ab", "swap_ab is for families sm90"),
], ids=["pdl-on-ada", "swap-on-sm120", "swap-on-sm100"])
def test_launch_features_are_limited_to_families_that_have_them(family, flag, match):
    raw = _table(m_tiles=[{"max_m": None, "block_m": 64, "num_warps": 4, "num_stages": 3,
                           "use_tma": True, flag: True}])
    raw["family"] = family
    with pytest.raises(ValueError, match=match):
        parse_policy(raw, "candidate.json")


@pytest.mark.parametrize("flag", ["use_pdl", "swap_ab"])
def test_launch_features_parse_on_sm90(flag):
    raw = _table(block_k=256, m_tiles=[{"max_m": None, "block_m": 64, "num_warps": 4,
                                        "num_stages": 8, "use_tma": True, flag: True}])
    raw["family"] = "sm90"
    assert getattr(parse_policy(raw, "candidate.json").select(1, 64, 128), flag) is True


def _entry_with_tile_block_k(block_k, *, k=4096, split_k=2):
    # SM90 entries step K by its promotion interval (256); a tile may take whole multiples.
    raw = _table(block_k=256,
                 m_tiles=[{"max_m": 16, "block_m": 16, "num_warps": 4, "num_stages": 3,
                           "use_tma": True, "swap_ab": True, "block_k": block_k},
                          {"max_m": None, "block_m": 128, "num_warps": 4, "num_stages": 3}])
    raw["family"] = "sm90"
    raw["entries"] = [dict(raw["default"], n=4096, k=k, split_k=split_k)]
    raw["default"] = _table(block_k=256)["default"]
    return raw


def test_tile_block_k_override_keeps_the_schedule():
    policy = parse_policy(_entry_with_tile_block_k(512), "candidate.json")
    small, large = policy.select(1, 4096, 4096), policy.select(4096, 4096, 4096)
    assert (small.block_k, large.block_k) == (512, 256)
    assert small.k_partition(4096) == large.k_partition(4096)


def test_schedule_identity_counts_a_tile_block_k_override():
    """The override keeps the K partition, but each tl.dot is one group of the sum, so the
    schedule identity (what the one-schedule-for-every-M checks compare) tells them apart."""
    policy = parse_policy(_entry_with_tile_block_k(512), "candidate.json")
    small, large = policy.select(1, 4096, 4096), policy.select(4096, 4096, 4096)
    assert small.reduction_schedule(4096) != large.reduction_schedule(4096)
    assert small.reduction_schedule(4096)._replace(block_k=256) == \
        large.reduction_schedule(4096)


@pytest.mark.parametrize("block_k,k,split_k", [(512, 4352, 1), (512, 4608, 2), (384, 4096, 2)],
                         ids=["k-not-multiple", "chunks-move", "not-pow2"])
def test_tile_block_k_override_that_moves_the_schedule_is_rejected(block_k, k, split_k):
    with pytest.raises(ValueError, match="m_tile block_k"):
        parse_policy(_entry_with_tile_block_k(block_k, k=k, split_k=split_k), "candidate.json")


def test_tile_block_k_override_is_rejected_outside_sm90():
    raw = _entry_with_tile_block_k(256)
    raw["family"] = "sm120"
    with pytest.raises(ValueError, match="block_k overrides are for families sm90"):
        parse_policy(raw, "candidate.json")


H100_H200_SMS = 132


def test_sm90_pdl_only_on_named_single_wave_decode_tiles():
    """PDL measured faster only where the whole grid fits on the GPU at once (the next
    kernel's programs then wait beside it instead of displacing it); on a multi-wave grid
    (gate_up at M=16) it measured 30% slower. Unknown shapes (the default entry) never use it."""
    policy = shipped_policy("sm90")
    assert not any(t.use_pdl for t in policy.default.m_tiles)
    for entry in policy.entries.values():
        for tile in entry.m_tiles:
            if not tile.use_pdl:
                continue
            config = entry.select(tile.max_m)
            programs = (-(-entry.n // config.block_n) * -(-tile.max_m // config.block_m)
                        * (config.split_k if config.use_workspace else 1))
            assert programs <= H100_H200_SMS, (entry.key, tile)


def _sm90_decode_tile(**fields):
    raw = _table(block_k=256, m_tiles=[
        {"max_m": 16, "block_m": 16, "num_warps": 4, "num_stages": 4, "use_tma": True,
         "swap_ab": True, "use_pdl": True, **fields},
        {"max_m": None, "block_m": 128, "num_warps": 8, "num_stages": 3, "use_tma": True}])
    raw["family"] = "sm90"
    return raw


def test_prefetch_k_parses_on_a_pdl_tma_tile_and_round_trips(tmp_path):
    policy = parse_policy(_sm90_decode_tile(prefetch_k=2048), "candidate.json")
    assert (policy.select(1, 64, 4096).prefetch_k, policy.select(4096, 64, 4096).prefetch_k) \
        == (2048, 0)
    assert m_tile_text(policy.default.m_tiles[0]).endswith(" pdl pf2048")
    path = write_policy_file(tmp_path / "t.json", policy_json(policy))
    assert load_policy_file(path).default.m_tiles[0].prefetch_k == 2048
    assert "prefetch_k" not in json.loads(path.read_text())["default"]["m_tiles"][1]


@pytest.mark.parametrize("fields,match", [
    ({"prefetch_k": 100}, "prefetch_k must be 0 or a positive multiple of 128"),
    ({"prefetch_k": -128}, "prefetch_k must be 0 or a positive multiple of 128"),
    ({"prefetch_k": "2048"}, "prefetch_k must be 0 or a positive multiple of 128"),
    ({"prefetch_k": 1024, "use_pdl": False}, "prefetch_k 1024 needs use_pdl and use_tma"),
    ({"prefetch_k": 1024, "use_tma": False, "swap_ab": False},
     "prefetch_k 1024 needs use_pdl and use_tma"),
], ids=["not-whole-lines", "negative", "string", "without-pdl", "without-tma"])
def test_prefetch_k_outside_a_pdl_tma_tile_is_rejected(fields, match):
    with pytest.raises(ValueError, match=match):
        parse_policy(_sm90_decode_tile(**fields), "candidate.json")
