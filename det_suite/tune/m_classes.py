"""From timings to an entry: the M classes the timed row counts stand for, the m_tiles
built from each class's fastest variant, reductions ranked across M, and the entry itself
(validated by the parser that loads tables).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from det_suite.bench.gemm import geometric_mean
from det_suite.policy import MTile, TableEntry, entry_json, parse_entry
from det_suite.tune.space import GROUP_M, Reduction, Variant, floor_pow2


def class_bounds(ms: Sequence[int]) -> list[int | None]:
    """Upper bound (max_m) of each timed M's class: the power of two at or below the
    geometric midpoint to the next timed M (never below the M itself); the last is None."""
    ms = sorted(ms)
    bounds: list[int | None] = []
    for lo, hi in zip(ms, ms[1:]):
        bound = max(lo, floor_pow2(math.sqrt(lo * hi)))
        bounds.append(min(bound, hi - 1))
    bounds.append(None)
    return bounds


def build_m_tiles(best: dict[int, Variant]) -> tuple[MTile, ...]:
    """m_tiles from the fastest variant per timed M.

    A workspace variant covers no M above the one it was timed at (its cost grows with M
    and nothing says it still wins there); if the largest class used the workspace, the
    unbounded tile is the same variant without it (same arithmetic, docs/invariance-rule.md).
    """
    if not best:
        raise ValueError("no timed M classes to build m_tiles from")
    ms = sorted(best)
    tiles = []
    for m, bound in zip(ms, class_bounds(ms)):
        var = best[m]
        if var.use_workspace:
            tiles.append(var.tile(m))
            if bound is None:
                tiles.append(replace(var, use_workspace=False).tile(None))
        else:
            tiles.append(var.tile(bound))
    merged: list[MTile] = []
    for tile in tiles:
        if merged and replace(merged[-1], max_m=None) == replace(tile, max_m=None):
            merged[-1] = tile  # the later (wider) bound covers both
        else:
            merged.append(tile)
    return tuple(merged)


def rank_reductions(times: dict[Reduction, dict[int, float | None]],
                    ms: Sequence[int]) -> list[tuple[Reduction, float]]:
    """Reductions by the geometric mean over `ms` of time / best time at that M. A reduction
    missing a time at some M (failed, or not measured) ranks last (score inf)."""
    best_at = {}
    for m in ms:
        valid = [t[m] for t in times.values() if t.get(m) is not None]
        if valid:
            best_at[m] = min(valid)
    ranked = []
    for red, t in times.items():
        if all(t.get(m) is not None for m in ms) and all(m in best_at for m in ms):
            score = geometric_mean(t[m] / best_at[m] for m in ms)
        else:
            score = math.inf
        ranked.append((red, score))
    return sorted(ranked, key=lambda item: (item[1], item[0]))


def make_entry(n: int, k: int, red: Reduction, tiles: Sequence[MTile],
               group_m: int = GROUP_M) -> TableEntry:
    """A TableEntry, validated by the same parser that loads tables."""
    entry = TableEntry(n=n, k=k, block_n=red.block_n, block_k=red.block_k,
                       split_k=red.split_k, group_m=group_m, m_tiles=tuple(tiles))
    return parse_entry(entry_json(entry), f"tuned entry {n}x{k}", n, k)
