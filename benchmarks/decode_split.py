"""A candidate extension of the SM90 rule (`policy.generic`) for small N with large K at
decode. Measured on an H100 (round 3, `docs/kernel-promotion.md`): 1536 x 7168 at M = 1 from
2.15x to 1.69x the weight-bytes floor, short of 1.3x, so not served; it stays here, beside the
benchmark that prices it (`kernel_round3_bench.py`, run by tools/gpu_kernel_round3.sh).

The rule splits K only from K = 8192 (MIN_SPLIT_K). A weight with few decode tiles and
K below that (1536 x 7168: 24 swapped 64-row tiles on 132 SMs) then streams on a fifth of
the GPU, 2.21x the weight-bytes floor at M = 1 on the H100 (issue 40). The candidate lowers
the threshold where the decode grid fills less than half the SMs: split into
floor(SMs / decode tiles) chunks of at least 2048 elements, at most 8, as the rule does
above the threshold. Like the rule's, the split is a function of (N, K, SM count) only, so
every M of the shape shares it (large-M tiles realise it in registers), and it changes the
shape's bits, which is why it is a table/rule decision and not a launch detail.
"""

from __future__ import annotations

from dataclasses import replace

from det_suite.policy.generic import (BLOCK_K, DECODE_BLOCK_N, MAX_SPLIT, MIN_CHUNK_K,
                                      MIN_SPLIT_K, _sm90_tiles, split_for)
from det_suite.policy.tiles import TableEntry, promotion_k

MIN_CANDIDATE_K = 4096  # below: too few K tiles for two 2048-element chunks to pay


def candidate_split(n: int, k: int, sm_count: int) -> int:
    """The candidate's split for (N, K) on `sm_count` SMs (the rule's where it splits)."""
    rule = split_for(n, k, sm_count)
    decode_tiles = -(-n // DECODE_BLOCK_N)
    if k >= MIN_SPLIT_K or k < MIN_CANDIDATE_K or 2 * decode_tiles > sm_count:
        return rule
    want = max(1, sm_count // decode_tiles)
    return max(1, min(want, k // MIN_CHUNK_K, MAX_SPLIT, -(-k // BLOCK_K)))


def entry_with_split(n: int, k: int, sm_count: int, split: int) -> TableEntry:
    """The SM90 rule's tiles for (N, K) at `split` chunks: what serving a split needs."""
    from det_suite.policy.table_format import parse_entry

    raw = dict(block_n=128, block_k=BLOCK_K, split_k=split, group_m=8,
               m_tiles=_sm90_tiles(n, k, split))
    entry = parse_entry(raw, f"candidate split {n}x{k} ({sm_count} SMs, {split} chunks)", n, k)
    return replace(entry, promote_k=promotion_k("sm90"))


def candidate_entry(family: str, n: int, k: int, sm_count: int) -> TableEntry | None:
    """`policy.generic.generic_entry` with the candidate's split (same signature)."""
    if family != "sm90":
        return None
    return entry_with_split(n, k, sm_count, candidate_split(n, k, sm_count))
