"""Statistics of an A/B timing: medians, ranges and a confidence interval for the ratio of
two arms' pooled medians.

The interval is a two-level (hierarchical) bootstrap: each resample draws the arm's boots
with replacement, then each drawn boot's samples with replacement, and takes the ratio of
the pooled medians. Boots are the unit that varies most (a fresh process, a fresh CUDA
context, another clock state), so resampling samples alone would claim a precision that a
second run would not reproduce. With two boots per arm the interval is wide; that is what
two boots can show.
"""

from __future__ import annotations

import statistics
from typing import Sequence

import numpy as np

DEFAULT_RESAMPLES = 4000
DEFAULT_LEVEL = 0.95


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median: no values")
    return float(statistics.median(values))


def value_range(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        raise ValueError("range: no values")
    return float(min(values)), float(max(values))


def _resampled_medians(boots: Sequence[Sequence[float]], resamples: int,
                       rng: np.random.Generator) -> np.ndarray:
    """Pooled medians of `resamples` two-level bootstrap draws over `boots`."""
    sizes = {len(b) for b in boots}
    if len(sizes) == 1:
        data = np.asarray(boots, dtype=float)                      # (boots, samples)
        n_boots, n_samples = data.shape
        picks = rng.integers(0, n_boots, size=(resamples, n_boots))
        rows = data[picks]                                          # (R, boots, samples)
        cols = rng.integers(0, n_samples, size=rows.shape)
        drawn = np.take_along_axis(rows, cols, axis=2)
        return np.median(drawn.reshape(resamples, -1), axis=1)
    # Unequal boots (an interrupted run resumed with other settings never gets here; a
    # failed sample could): the same draw, one resample at a time.
    out = np.empty(resamples)
    for r in range(resamples):
        chosen = [boots[i] for i in rng.integers(0, len(boots), size=len(boots))]
        out[r] = np.median(np.concatenate([rng.choice(np.asarray(b, dtype=float), size=len(b))
                                           for b in chosen]))
    return out


def ratio_interval(a_boots: Sequence[Sequence[float]], b_boots: Sequence[Sequence[float]], *,
                   level: float = DEFAULT_LEVEL, resamples: int = DEFAULT_RESAMPLES,
                   seed: int = 0) -> tuple[float, float]:
    """Percentile interval of median(B) / median(A) at `level` (two-level bootstrap).

    `a_boots`, `b_boots`: per boot, that boot's sample values. Same inputs and seed, same
    interval."""
    if not 0 < level < 1:
        raise ValueError(f"level: expected a value in (0, 1), got {level!r}")
    if resamples < 100:
        raise ValueError(f"resamples: expected at least 100, got {resamples!r}")
    for name, boots in (("a_boots", a_boots), ("b_boots", b_boots)):
        if not boots or any(len(b) == 0 for b in boots):
            raise ValueError(f"{name}: expected at least one boot, each with samples")
    rng = np.random.default_rng(seed)
    ratios = (_resampled_medians(b_boots, resamples, rng)
              / _resampled_medians(a_boots, resamples, rng))
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def pooled(boots: Sequence[Sequence[float]]) -> list[float]:
    return [v for boot in boots for v in boot]
