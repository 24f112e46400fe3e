"""Tiles for an (N, K) that no table entry names: a rule of (family, N, K, SM count).

A named entry is tuned for one shape; a model nobody tuned for still needs its decode grid
to fill the GPU and its large-M tiles to stream. The rule reproduces what tuning chose for
the shapes it has seen (docs in the table notes) from three quantities:

- decode tiles: ceil(N / 64) programs serve M <= 32 (the swapped 64-row weight tile). Fewer
  than the SM count leave SMs idle while each program streams a long K, so K is split into
  floor(SMs / decode tiles) chunks (at least 2048 elements each, at most 8), but only once
  K >= 8192: below that, measured split-K lost to its partial-sum traffic. Floor, not
  round: a split that overfills the GPU (two chunks of 80 tiles on 132 SMs) runs a second
  partial wave and lost at every M on the H200 (qwen3-32b's o projection: 1.34 -> 1.78 of
  cuBLAS at M = 128, evidence run h200-2026-12-03-d in docs/evidence/HISTORY.md), while 40
  tiles split three ways won (qwen3-4b's down projection at decode: 1.20 -> 0.85).
- the middle class (33 <= M <= 256) by N: 64 x 64 tiles up to N = 4096 (enough programs
  to fill the GPU), 128 x 128 on two warpgroups from N = 8192, 64 x 128 between; above
  M = 256 every shape takes 128 x 128 on two warpgroups. Decode tiles pipeline deeper on
  long K (6 stages from K = 8192) and shallower on wide N (3 from N = 16384).
- split K: small-M tiles realise the split with a workspace, large-M tiles in registers.
- BLOCK_K 256, SM90's promotion interval: one promotion point per loop iteration.

SPLIT_K and BLOCK_K follow (N, K, SM count) only, so M still never changes the reduction
schedule; the SM count is fixed for a device, so one GPU always runs one schedule per shape
(two GPUs of one family with different SM counts may differ on shapes no entry names:
reports record the SM count beside the family).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from det_suite.policy.tiles import TableEntry, promotion_k
from det_suite.policy.warp_specialized import RULE_WARP_SPECIALIZED_MIN_K

DECODE_BLOCK_N = 64
MIN_SPLIT_K = 8192        # K below this: one chunk
MIN_CHUNK_K = 2048
MAX_SPLIT = 8
WIDE_N = 16384
BLOCK_K = promotion_k("sm90")  # one promotion point per K step

# Families with a rule; the others serve unnamed shapes with their table's default entry.
RULE_FAMILIES = ("sm90",)


def split_for(n: int, k: int, sm_count: int) -> int:
    if k < MIN_SPLIT_K:
        return 1
    decode_tiles = -(-n // DECODE_BLOCK_N)
    want = max(1, sm_count // decode_tiles)
    return max(1, min(want, k // MIN_CHUNK_K, MAX_SPLIT))


def _sm90_tiles(n: int, k: int, split: int) -> list[dict]:
    # Measured with FP32 promotion every 256 on the H200 (the promotion sweep of evidence
    # run h200-2026-12-03-d, docs/evidence/HISTORY.md; twelve shapes, M = 1..8192): the MMA
    # pipeline drains at each promotion point, so tiles win that keep two warpgroups busy
    # (128 x 128 on 8 warps) once M fills them.
    ws = {"use_workspace": True} if split > 1 else {}
    decode_stages = 3 if n >= WIDE_N else (6 if k >= MIN_SPLIT_K else 4)
    swap = dict(block_n=64, num_warps=4, num_stages=decode_stages, use_tma=True, swap_ab=True,
                **ws)
    decode = dict(max_m=16, block_m=16, **swap)
    if split == 1 and n < WIDE_N:
        # An early launch measured faster on single-wave decode grids; moves the launch only.
        decode["use_pdl"] = True
    if n <= 4096:
        mid = dict(block_m=64, block_n=64, num_warps=4, num_stages=4)
    elif n >= 8192:
        mid = dict(block_m=128, block_n=128, num_warps=8, num_stages=3)
    else:
        mid = dict(block_m=64, block_n=128, num_warps=4, num_stages=4)
    large = dict(max_m=None, block_m=128, block_n=128, num_warps=8, num_stages=3, use_tma=True)
    if RULE_WARP_SPECIALIZED_MIN_K is not None and k >= RULE_WARP_SPECIALIZED_MIN_K:
        # The same schedule on two warpgroups out of phase (policy.warp_specialized).
        large["warp_specialized"] = True
    return [decode,
            dict(max_m=32, block_m=32, **swap),
            dict(max_m=256, use_tma=True, **mid, **ws),
            large]


@lru_cache(maxsize=1024)
def generic_entry(family: str, n: int, k: int, sm_count: int) -> TableEntry | None:
    """The rule's entry for (N, K) on a `family` GPU with `sm_count` SMs; None where the
    family has no rule. Validated like a table entry."""
    from det_suite.policy.table_format import parse_entry

    if family not in RULE_FAMILIES:
        return None
    if n < 1 or k < 1 or sm_count < 1:
        raise ValueError(f"generic_entry: N, K and sm_count must be >= 1; got {n}, {k}, "
                         f"{sm_count}")
    split = split_for(n, k, sm_count)
    # A split needs whole BLOCK_K tiles per chunk: fall back to fewer chunks where K has
    # fewer tiles than chunks would need (parse_entry rejects empty chunks).
    split = min(split, -(-k // BLOCK_K))
    raw = dict(block_n=128, block_k=BLOCK_K, split_k=split, group_m=8,
               m_tiles=_sm90_tiles(n, k, split))
    entry = parse_entry(raw, f"generic rule {family} {n}x{k} ({sm_count} SMs)", n, k)
    return replace(entry, promote_k=promotion_k(family))
