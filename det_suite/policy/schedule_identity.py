"""The reduction schedule of a launch config: every field that changes the arithmetic.

Two configs with equal schedules (on one GPU family, whose MMA instruction the lint pins)
must give the same bits; the invariance rule says M may never change it. It holds:

- the K partition (`LaunchConfig.k_partition`): chunk length, chunk count (split-K), and
  the K the MMA steps run to (padding to whole BLOCK_K tiles);
- BLOCK_K itself: each `tl.dot` over one BLOCK_K tile is one group of the sum. On SM90 with
  promotion, a BLOCK_K of whole promotion intervals may well give the same bits (the MMA
  promotes inside the dot), but that is a claim about the hardware the interpreter's ordered
  sum does not share, so the identity counts BLOCK_K and a tile that changes it with M is
  flagged on the CPU rather than trusted;
- the FP32 promotion interval (None: unpromoted).

What it leaves out moves loads or the launch, never the sum: BLOCK_M and BLOCK_N, warps,
stages, TMA vs pointer loads, swapped operands, workspace vs in-register split-K, PDL,
prefetch, warp specialisation. Those are proven equal bit for bit by the invariance suite,
not assumed by this identity.
"""

from __future__ import annotations

from typing import NamedTuple


class ReductionSchedule(NamedTuple):
    k_chunk: int            # K elements per split chunk (whole BLOCK_K tiles)
    split_k: int            # chunks, summed separately and added in ascending order
    k_padded: int           # K the MMA steps run to
    block_k: int            # K elements per tl.dot (one group of the sum)
    promote_k: int | None   # FP32 promotion interval along K; None: none


def reduction_schedule(config, k: int) -> ReductionSchedule:
    """`config`'s schedule for a K (config: a `policy.tiles.LaunchConfig`)."""
    return ReductionSchedule(*config.k_partition(k), config.block_k, config.promote_k)


def schedules_over_m(policy, n: int, k: int, ms) -> dict[ReductionSchedule, list[int]]:
    """The schedules `policy` (a `TilePolicy`, served on a device or not) gives (N, K) over
    the row counts `ms`, each with the Ms that get it: one key, or M changes the sum."""
    found: dict[ReductionSchedule, list[int]] = {}
    for m in ms:
        found.setdefault(policy.select(m, n, k).reduction_schedule(k), []).append(m)
    return found
