"""Shapes no table entry names: the SM90 rule of (N, K, SM count), and the family's FP32
promotion interval carried by every tile (policy.generic, policy.tiles.FAMILY_PROMOTE_K)."""

import json

import pytest

from det_suite.models.catalog import MODELS, projections
from det_suite.ops.launch_spec import gemm_launch_spec
from det_suite.policy import parse_policy, shipped_families, shipped_policy
from det_suite.policy.generic import MIN_SPLIT_K, RULE_FAMILIES, generic_entry, split_for
from det_suite.policy.tiles import FAMILY_PROMOTE_K, promotion_k

H200_SMS = 132
SCHEDULE_MS = (1, 2, 15, 16, 17, 31, 32, 33, 64, 65, 128, 129, 256, 257, 1024, 1025, 4097, 9000)
CATALOG = sorted({(p.n, p.k) for model in MODELS for p in projections(model)})
UNNAMED = [(n, k) for n, k in CATALOG if (n, k) not in shipped_policy("sm90").entries] + [
    (1024, 80), (2048, 8192), (3072, 3072), (96, 65536)]


def shape_id(shape):
    return f"{shape[0]}x{shape[1]}"


@pytest.mark.parametrize("sm_count", [78, 114, 132, 170])
@pytest.mark.parametrize("shape", UNNAMED, ids=shape_id)
def test_rule_keeps_one_reduction_schedule_for_every_m(shape, sm_count):
    n, k = shape
    policy = shipped_policy("sm90").on_device(sm_count)
    configs = [policy.select(m, n, k) for m in SCHEDULE_MS]
    assert len({c.reduction_schedule(k) for c in configs}) == 1
    assert {c.promote_k for c in configs} == {FAMILY_PROMOTE_K["sm90"]}


@pytest.mark.parametrize("shape", UNNAMED, ids=shape_id)
def test_rule_entries_pass_the_table_validation(shape):
    n, k = shape
    entry = generic_entry("sm90", n, k, H200_SMS)
    raw = {"family": "sm90", "default": json.loads(json.dumps(
        {"block_n": 128, "block_k": 256, "m_tiles": [
            {"max_m": None, "block_m": 128, "num_warps": 8, "num_stages": 3}]})),
        "entries": [{"n": n, "k": k, "block_n": entry.block_n, "block_k": entry.block_k,
                     "split_k": entry.split_k, "group_m": entry.group_m,
                     "m_tiles": [dict(t.__dict__) for t in entry.m_tiles]}]}
    assert parse_policy(raw, "rule").entry(n, k).m_tiles == entry.m_tiles


@pytest.mark.parametrize("n,k,sms,split", [
    (4096, 4096, 132, 1),       # K below MIN_SPLIT_K: one chunk
    (4096, 14336, 132, 2),      # 64 decode tiles on 132 SMs
    (5120, 8192, 132, 1),       # 80 tiles: a second chunk would overfill the GPU
    (2560, 9728, 132, 3),       # 40 tiles: three chunks fit one wave
    (8192, 28672, 132, 1),      # 128 decode tiles already fill the GPU
    (2048, 8192, 132, 4),       # capped by 2048-element chunks
    (1024, 65536, 132, 8),      # capped by MAX_SPLIT
    (4096, 14336, 78, 1),       # fewer SMs: the decode grid already fills them
], ids=lambda v: str(v))
def test_split_follows_decode_tiles_and_sm_count(n, k, sms, split):
    assert split_for(n, k, sms) == split


def test_split_never_depends_on_anything_but_n_k_and_sms():
    assert split_for(4096, MIN_SPLIT_K - 128, 10_000) == 1


def test_named_entries_win_over_the_rule():
    policy = shipped_policy("sm90").on_device(H200_SMS)
    for (n, k), entry in policy.entries.items():
        assert policy.entry(n, k) is entry and policy.entry_origin(n, k) == "named"


def test_without_a_device_unnamed_shapes_take_the_default_entry():
    policy = shipped_policy("sm90")
    assert policy.entry(4096, 14336) is policy.default
    assert policy.entry_origin(4096, 14336) == "default"


@pytest.mark.parametrize("family", [f for f in shipped_families() if f not in RULE_FAMILIES])
def test_families_without_a_rule_keep_their_default(family):
    policy = shipped_policy(family).on_device(H200_SMS)
    assert generic_entry(family, 4096, 14336, H200_SMS) is None
    assert policy.entry(4096, 14336) is policy.default


@pytest.mark.parametrize("bad", [(0, 4096, 132), (4096, 0, 132), (4096, 4096, 0)],
                         ids=["n0", "k0", "sm0"])
def test_rule_rejects_non_positive_arguments(bad):
    with pytest.raises(ValueError, match="must be >= 1"):
        generic_entry("sm90", *bad)


@pytest.mark.parametrize("family", shipped_families())
def test_every_tile_of_a_family_carries_its_promotion_interval(family):
    policy = shipped_policy(family)
    for entry in policy.all_entries():
        for m in SCHEDULE_MS:
            assert policy.select(m, entry.n or 4096, entry.k or 4096).promote_k \
                == promotion_k(family)


@pytest.mark.parametrize("family,expected", [("sm90", 256), ("sm120", None), ("sm89", None),
                                             ("sm100", None), ("default", None)])
def test_promotion_reaches_the_kernel_as_a_constexpr(family, expected):
    config = shipped_policy(family).select(16, 4096, 4096)
    spec = gemm_launch_spec(config, 16, 4096, 4096, has_bias=False, use_tma=config.use_tma)
    assert dict(spec.calls[0].constexprs)["PROMOTE_K"] == expected


@pytest.mark.parametrize("block_k", [128, 64], ids=["bk128", "bk64"])
def test_sm90_tables_reject_block_k_shorter_than_the_promotion_interval(block_k):
    raw = {"family": "sm90", "default": {"block_n": 128, "block_k": block_k, "m_tiles": [
        {"max_m": None, "block_m": 64, "num_warps": 4, "num_stages": 3}]}}
    with pytest.raises(ValueError, match="promotion interval"):
        parse_policy(raw, "short-k")
