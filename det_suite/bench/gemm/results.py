"""What the GEMM benchmark measured, as data: one cell per (mode, shape, M), a summary per
mode (geometric-mean and worst det/torch ratio, worst weight-bytes floor ratio), the whole
run with its JSON form, and the opt-in speed gate over the summaries."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

from det_suite.bench import MODE_DESCRIPTIONS
from det_suite.bench.gemm.shapes import GemmShape

REFERENCE_VENDOR = "torch_scaled_mm"
SCHEMA = "det_suite.bench.gemm/1"
# Cells with M up to this get the weight-bytes floor ratio (the default of --floor-max-m).
FLOOR_MAX_M = 128
# The weight-bytes floor criterion (issue #4) is judged on decode-sized calls only.
FLOOR_GATE_MAX_M = 16


def geometric_mean(values: Iterable[float]) -> float:
    values = list(values)
    if not values:
        raise ValueError("geometric mean of no values")
    if any(not (v > 0) or math.isinf(v) for v in values):
        raise ValueError(f"geometric mean needs finite positive values; got {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def weight_floor_us(n: int, k: int, bandwidth_bytes_per_s: float) -> float:
    """Time to read an FP8 [N, K] weight once at the copy bandwidth (bytes read+written/s,
    the convention of `copy_bandwidth`; reading is one side of a copy, so the weight's
    bytes go in the numerator as they are, matching docs/invariance-rule.md's floor numbers)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError("bandwidth must be positive")
    return n * k / bandwidth_bytes_per_s * 1e6


@dataclass
class CellResult:
    mode: str
    shape: GemmShape
    m: int
    det_us: float | None = None
    vendor_us: dict[str, float | None] = field(default_factory=dict)
    config: dict | None = None
    floor_us: float | None = None
    accuracy: dict | None = None
    fp64_error: dict | None = None   # fp64_error.Fp64Error.to_json(), when probed
    errors: list[str] = field(default_factory=list)         # fail the run
    vendor_errors: dict[str, str] = field(default_factory=dict)  # recorded only

    @property
    def torch_us(self) -> float | None:
        return self.vendor_us.get(REFERENCE_VENDOR)

    @property
    def ratio(self) -> float | None:
        if self.errors or self.det_us is None or not self.torch_us:
            return None
        return self.det_us / self.torch_us

    @property
    def floor_ratio(self) -> float | None:
        if self.det_us is None or not self.floor_us:
            return None
        return self.det_us / self.floor_us

    def to_json(self) -> dict:
        return {
            "mode": self.mode, "shape": self.shape.name, "n": self.shape.n, "k": self.shape.k,
            "m": self.m, "det_us": self.det_us, "vendor_us": dict(self.vendor_us),
            "ratio_vs_torch_scaled_mm": self.ratio,
            "weight_floor_us": self.floor_us, "floor_ratio": self.floor_ratio,
            "vendor_floor_ratio": {name: (us / self.floor_us if us and self.floor_us else None)
                                   for name, us in self.vendor_us.items()},
            "config": self.config, "accuracy": self.accuracy, "fp64_error": self.fp64_error,
            "errors": list(self.errors), "vendor_errors": dict(self.vendor_errors),
        }


@dataclass(frozen=True)
class ModeSummary:
    mode: str
    cells: int
    timed_cells: int
    failed_cells: int
    geomean_ratio: float | None
    worst_ratio: float | None
    worst_shape: str | None
    worst_m: int | None
    # Largest det time / weight-bytes floor among cells with M <= FLOOR_GATE_MAX_M.
    worst_floor_ratio: float | None = None
    worst_floor_shape: str | None = None
    worst_floor_m: int | None = None
    # Largest det-suite / cuBLAS-default fp64 error ratio among probed cells.
    worst_error_ratio: float | None = None
    worst_error_shape: str | None = None
    worst_error_m: int | None = None

    def line(self) -> str:
        failed = f"; {self.failed_cells} cell(s) FAILED" if self.failed_cells else ""
        if self.geomean_ratio is None:
            return f"[{self.mode}] no timed cells{failed}"
        floor = ""
        if self.worst_floor_ratio is not None:
            floor = (f"; M <= {FLOOR_GATE_MAX_M} worst {self.worst_floor_ratio:.2f}x the "
                     f"weight-bytes floor at {self.worst_floor_shape} M={self.worst_floor_m}")
        error = ""
        if self.worst_error_ratio is not None:
            error = (f"; fp64 error worst {self.worst_error_ratio:.2f}x cuBLAS default's at "
                     f"{self.worst_error_shape} M={self.worst_error_m}")
        return (f"[{self.mode}] geometric mean det/torch {self.geomean_ratio:.3f} over "
                f"{self.timed_cells} cells; worst {self.worst_ratio:.3f} at {self.worst_shape} "
                f"M={self.worst_m}{floor}{error}{failed}")


def summarize(mode: str, cells: Sequence[CellResult]) -> ModeSummary:
    timed = [c for c in cells if c.ratio is not None]
    failed = sum(1 for c in cells if c.errors)
    if not timed:
        return ModeSummary(mode, len(cells), 0, failed, None, None, None, None)
    worst = max(timed, key=lambda c: c.ratio)
    floored = [c for c in timed if c.m <= FLOOR_GATE_MAX_M and c.floor_ratio is not None]
    worst_floor = max(floored, key=lambda c: c.floor_ratio) if floored else None
    probed = [c for c in cells if c.fp64_error]
    worst_error = max(probed, key=lambda c: c.fp64_error["ratio"]) if probed else None
    return ModeSummary(mode, len(cells), len(timed), failed,
                       geometric_mean(c.ratio for c in timed), worst.ratio, worst.shape.name,
                       worst.m,
                       worst_floor.floor_ratio if worst_floor else None,
                       worst_floor.shape.name if worst_floor else None,
                       worst_floor.m if worst_floor else None,
                       worst_error.fp64_error["ratio"] if worst_error else None,
                       worst_error.shape.name if worst_error else None,
                       worst_error.m if worst_error else None)


@dataclass
class BenchRun:
    shapes: list[GemmShape]
    ms: list[int]
    modes: list[str]
    vendors: dict[str, str]
    policy_source: str
    policy_family: str
    copy_bandwidth: float | None
    settings: dict
    cells: dict[str, list[CellResult]] = field(default_factory=dict)
    environment: dict | None = None
    launch_floor_us: dict[str, float] = field(default_factory=dict)  # per mode, no-op kernel

    @property
    def failed(self) -> bool:
        return any(c.errors for cells in self.cells.values() for c in cells)

    def summaries(self) -> dict[str, ModeSummary]:
        return {mode: summarize(mode, cells) for mode, cells in self.cells.items()}

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "environment": self.environment,
            "settings": self.settings,
            "shapes": [asdict(s) for s in self.shapes],
            "m": self.ms,
            "policy": {"source": self.policy_source, "family": self.policy_family},
            "vendors": self.vendors,
            "hbm_copy_bandwidth_bytes_per_s": self.copy_bandwidth,
            "launch_floor_us": dict(self.launch_floor_us),
            "ok": not self.failed,
            "modes": {mode: {"description": MODE_DESCRIPTIONS.get(mode, mode),
                             "summary": asdict(self.summaries()[mode]),
                             "cells": [c.to_json() for c in cells]}
                      for mode, cells in self.cells.items()},
        }


def gate_failures(summaries: dict[str, ModeSummary], *, max_geomean: float | None,
                  max_cell: float | None, max_floor_ratio: float | None = None,
                  max_error_ratio: float | None = None) -> list[str]:
    """Speed and accuracy gates (opt-in): which thresholds a mode's summary exceeds."""
    failures = []
    for mode, s in summaries.items():
        if max_error_ratio is not None and s.worst_error_ratio is not None \
                and s.worst_error_ratio > max_error_ratio:
            failures.append(f"[{mode}] {s.worst_error_shape} M={s.worst_error_m}: fp64 error "
                            f"{s.worst_error_ratio:.2f}x cuBLAS default's > "
                            f"{max_error_ratio:g}")
        if s.geomean_ratio is None:
            continue
        if max_floor_ratio is not None and s.worst_floor_ratio is not None \
                and s.worst_floor_ratio > max_floor_ratio:
            failures.append(f"[{mode}] {s.worst_floor_shape} M={s.worst_floor_m} takes "
                            f"{s.worst_floor_ratio:.2f}x the weight-bytes floor > "
                            f"{max_floor_ratio:g}")
        if max_geomean is not None and s.geomean_ratio > max_geomean:
            failures.append(f"[{mode}] geometric mean {s.geomean_ratio:.3f} > {max_geomean:g}")
        if max_cell is not None and s.worst_ratio > max_cell:
            failures.append(f"[{mode}] worst cell {s.worst_ratio:.3f} at {s.worst_shape} "
                            f"M={s.worst_m} > {max_cell:g}")
    return failures
