"""What a tile table could get from a sweep without changing one output bit: per cell, the
fastest of the shipped launch and the swept arms that gave the shipped launch's bits
(`equals_shipped`), as a ratio to torch._scaled_mm, by M and overall. Shared by the GEMM
sweeps (tools/promotion_interval_sweep.py, tools/pingpong_gemm_sweep.py); an arm whose bits
were not checked or differ never counts.

A class restricts the arms a table could use (e.g. only the tiles the shipped kernel can
already run); the shipped launch is always a contender, so a class never does worse than
shipped.
"""

from __future__ import annotations

from typing import Callable, Iterable

from det_suite.bench.gemm.results import geometric_mean

ArmFilter = Callable[[dict], bool]


def geomean_or_none(values) -> float | None:
    """The geometric mean, or None for no values (a class or schedule that never ran)."""
    values = list(values)
    return geometric_mean(values) if values else None


def fastest_same_bits(cell: dict, admits: ArmFilter = lambda _row: True) -> tuple[float, str]:
    """(us, arm tag) of the cell's fastest launch with the shipped bits: "shipped" or an arm
    that `admits` and gave the shipped bits."""
    same = [(row["us"], row["arm"]) for row in cell["arms"]
            if row.get("equals_shipped") is True and "us" in row and admits(row)]
    return min([(cell["shipped_us"], "shipped"), *same])


def same_bits_summary(cells: Iterable[dict], classes: dict[str, ArmFilter]) -> dict:
    """Per class: geomean over timed cells of its fastest same-bits launch / torch, by M and
    overall, its worst cell, and how many cells each arm won; "shipped" is the table as is."""
    timed = [c for c in cells if "torch_us" in c]
    out = {}
    for name, admits in {"shipped": lambda _row: False, **classes}.items():
        by_m: dict[int, list[float]] = {}
        ratios, wins = [], {}
        for cell in timed:
            us, arm = fastest_same_bits(cell, admits)
            ratio = us / cell["torch_us"]
            ratios.append(ratio)
            by_m.setdefault(cell["m"], []).append(ratio)
            wins[arm] = wins.get(arm, 0) + 1
        out[name] = {"geomean": geomean_or_none(ratios),
                     "worst": max(ratios, default=None),
                     "by_m": {m: geometric_mean(v) for m, v in sorted(by_m.items())},
                     "wins": dict(sorted(wins.items(), key=lambda kv: -kv[1]))}
    return out


def markdown_table(summary: dict) -> list[str]:
    """The summary as Markdown lines: one row per class, one column per M."""
    ms = sorted({m for row in summary.values() for m in row["by_m"]})
    lines = ["| arms a table may use | " + " | ".join(f"M={m}" for m in ms)
             + " | geomean | worst |", "| --- |" + " --- |" * (len(ms) + 2)]
    for name, row in summary.items():
        if row["geomean"] is None:
            continue
        lines.append(f"| {name} | " + " | ".join(
            f"{row['by_m'][m]:.3f}" if m in row["by_m"] else "-" for m in ms)
            + f" | {row['geomean']:.3f} | {row['worst']:.3f} |")
    return lines
