"""FP8 GEMM benchmark: det-suite's `fp8_scaled_mm` against every vendor GEMM available here.

Per (N, K) shape and row count M, one process, the same quantized operands for everyone:
random FP8 activations (M, K) and weight [N, K] (never zeros, so nothing is shortcut and
wrong results cannot hide), static per-tensor scales, BF16 output, no bias (Qwen3's
linears have none).

Each cell:
1. runs `torch._scaled_mm` (the reference), det-suite's public `fp8_scaled_mm` (validated
   path, the policy's choice of LaunchConfig) and every other vendor once, and compares
   each output with the reference (accuracy sanity, not invariance: a wrong kernel must
   never get a time);
2. times det-suite through `launch_fp8_gemm` with that same LaunchConfig and a
   preallocated output, after checking it returns bitwise what the public path returned:
   the numbers are the GPU time of exactly the launches `fp8_scaled_mm` makes, without its
   host-side argument validation (hidden by the timers' padding or a CUDA Graph anyway);
3. records median microseconds per mode, det/torch ratio, and for small M the ratio to the
   weight-bytes floor (reading the FP8 weight once at the measured copy bandwidth).

Errors (a wrong or failing det-suite result, a failing reference) are recorded in the cell
and make the run fail; a wrong or failing optional vendor is recorded as a vendor error
only (it is not det-suite's result).
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

if TYPE_CHECKING:  # torch is imported inside functions: the CLI imports this module to
    import torch  # register its options, and `det-suite --help` must stay fast

from det_suite.bench import MODE_DESCRIPTIONS, MODES
from det_suite.models.catalog import MODELS, projections

REFERENCE_VENDOR = "torch_scaled_mm"
DEFAULT_MS = (1, 8, 32, 128, 512, 2048, 8192)
DEFAULT_MODES = ("warm", "flush")
FLOOR_MAX_M = 128
# The weight-bytes floor criterion (issue #4) is judged on decode-sized calls only.
FLOOR_GATE_MAX_M = 16
SCHEMA = "det_suite.bench.gemm/1"
# Accuracy sanity, as tests/unit/test_fp8_linear.py justifies from the H200 run: BF16
# output rounding is 2**-8 relative, and Hopper's FP8 wgmma accumulates with fewer mantissa
# bits than fp32 between promotions (Triton's default), which left isolated outputs ~1% of
# max|ref| off at K = 12288, while torch._scaled_mm promotes. A wrong tile, a stale buffer or
# garbage is off by O(1) and fails both bounds.
REL_FRO_TOL = 1e-2
MAX_ABS_TOL = 5e-2  # times max |reference|


@dataclass(frozen=True)
class GemmShape:
    name: str
    n: int
    k: int

    @property
    def dims(self) -> str:
        return f"{self.n}x{self.k}"


def _preset(model: str) -> tuple[GemmShape, ...]:
    """A model's projections from the shape catalog, named '<model>/<projection>'."""
    return tuple(GemmShape(f"{p.model}/{p.name}", p.n, p.k) for p in projections(model))


SHAPE_PRESETS: dict[str, tuple[GemmShape, ...]] = {model: _preset(model) for model in MODELS}
_EXPLICIT = re.compile(r"^(?:(?P<name>[A-Za-z0-9_./-]+)=)?(?P<n>\d+)\s*[,xX]\s*(?P<k>\d+)$")


def parse_shape(spec: str) -> tuple[GemmShape, ...]:
    """A preset name, `N,K`, `NxK` or `NAME=N,K` -> the shapes it names."""
    spec = spec.strip()
    if spec in SHAPE_PRESETS:
        return SHAPE_PRESETS[spec]
    match = _EXPLICIT.match(spec)
    if not match:
        raise ValueError(f"shape {spec!r} is neither a preset ({', '.join(SHAPE_PRESETS)}) "
                         "nor N,K (e.g. 4096,14336)")
    n, k = int(match["n"]), int(match["k"])
    if n < 1 or k < 1:
        raise ValueError(f"shape {spec!r}: N and K must be >= 1")
    if n % 16 or k % 16:
        # torch._scaled_mm (cuBLASLt FP8) needs N and K divisible by 16.
        raise ValueError(f"shape {spec!r}: N and K must be multiples of 16 for the FP8 "
                         "vendor GEMMs")
    return (GemmShape(match["name"] or f"{n}x{k}", n, k),)


def parse_shapes(specs: Iterable[str]) -> list[GemmShape]:
    """Expand presets and explicit shapes; the first occurrence of an (N, K) wins."""
    shapes, seen = [], set()
    for spec in specs:
        for shape in parse_shape(spec):
            if (shape.n, shape.k) not in seen:
                seen.add((shape.n, shape.k))
                shapes.append(shape)
    if not shapes:
        raise ValueError("no shapes given")
    return shapes


def parse_ms(values: Iterable[int]) -> list[int]:
    ms = sorted(set(int(v) for v in values))
    if not ms or ms[0] < 1:
        raise ValueError(f"M values must be >= 1; got {list(values)}")
    return ms


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
    bytes go in the numerator as they are, matching design.md's floor numbers)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError("bandwidth must be positive")
    return n * k / bandwidth_bytes_per_s * 1e6


# ------------------------------------------------------------------ data

def random_fp8(shape: tuple[int, ...], *, generator: torch.Generator,
               device: torch.device | str, std: float = 1.0) -> torch.Tensor:
    """Normal random values cast to float8_e4m3fn, none of them zero: magnitudes below the
    smallest normal (2**-6) are pushed up to it, keeping their sign."""
    import torch

    x = torch.randn(shape, generator=generator, device=device, dtype=torch.float32) * std
    tiny = 2.0 ** -6
    x = torch.where(x.abs() < tiny, torch.full_like(x, tiny).copysign(x), x)
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def scale_tensor(value: float, device) -> torch.Tensor:
    import torch

    return torch.tensor([value], dtype=torch.float32, device=device)


# ------------------------------------------------------------------ accuracy

@dataclass(frozen=True)
class Accuracy:
    ok: bool
    rel_fro_err: float
    max_abs_err: float
    ref_abs_max: float
    reason: str = ""


def check_accuracy(out: torch.Tensor, ref: torch.Tensor, *, rel_fro_tol: float = REL_FRO_TOL,
                   max_abs_tol: float = MAX_ABS_TOL) -> Accuracy:
    """Is `out` the same GEMM as `ref` up to output rounding? Not a bitwise check."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return Accuracy(False, math.inf, math.inf, math.nan,
                        f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    o, r = out.float(), ref.float()
    if not torch.isfinite(r).all():
        return Accuracy(False, math.nan, math.nan, math.nan, "reference has non-finite values")
    if not torch.isfinite(o).all():
        bad = int((~torch.isfinite(o)).sum())
        return Accuracy(False, math.nan, math.nan, float(r.abs().max()) if r.numel() else 0.0,
                        f"{bad} non-finite outputs")
    if o.numel() == 0:
        return Accuracy(True, 0.0, 0.0, 0.0)
    diff = o - r
    ref_abs_max = float(r.abs().max())
    max_abs_err = float(diff.abs().max())
    ref_norm = float(torch.linalg.vector_norm(r))
    diff_norm = float(torch.linalg.vector_norm(diff))
    rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    problems = []
    if rel > rel_fro_tol:
        problems.append(f"relative Frobenius error {rel:.3g} > {rel_fro_tol:g}")
    if max_abs_err > max_abs_tol * ref_abs_max:
        problems.append(f"max abs error {max_abs_err:.3g} > {max_abs_tol:g} x max|ref| "
                        f"{ref_abs_max:.3g}")
    return Accuracy(not problems, rel, max_abs_err, ref_abs_max, "; ".join(problems))


# ------------------------------------------------------------------ results

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
            "config": self.config, "accuracy": self.accuracy,
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

    def line(self) -> str:
        failed = f"; {self.failed_cells} cell(s) FAILED" if self.failed_cells else ""
        if self.geomean_ratio is None:
            return f"[{self.mode}] no timed cells{failed}"
        floor = ""
        if self.worst_floor_ratio is not None:
            floor = (f"; M <= {FLOOR_GATE_MAX_M} worst {self.worst_floor_ratio:.2f}x the "
                     f"weight-bytes floor at {self.worst_floor_shape} M={self.worst_floor_m}")
        return (f"[{self.mode}] geometric mean det/torch {self.geomean_ratio:.3f} over "
                f"{self.timed_cells} cells; worst {self.worst_ratio:.3f} at {self.worst_shape} "
                f"M={self.worst_m}{floor}{failed}")


def summarize(mode: str, cells: Sequence[CellResult]) -> ModeSummary:
    timed = [c for c in cells if c.ratio is not None]
    failed = sum(1 for c in cells if c.errors)
    if not timed:
        return ModeSummary(mode, len(cells), 0, failed, None, None, None, None)
    worst = max(timed, key=lambda c: c.ratio)
    floored = [c for c in timed if c.m <= FLOOR_GATE_MAX_M and c.floor_ratio is not None]
    worst_floor = max(floored, key=lambda c: c.floor_ratio) if floored else None
    return ModeSummary(mode, len(cells), len(timed), failed,
                       geometric_mean(c.ratio for c in timed), worst.ratio, worst.shape.name,
                       worst.m,
                       worst_floor.floor_ratio if worst_floor else None,
                       worst_floor.shape.name if worst_floor else None,
                       worst_floor.m if worst_floor else None)


def config_text(config: dict | None) -> str:
    if not config:
        return "-"
    text = (f"bm{config['block_m']} bn{config['block_n']} bk{config['block_k']} "
            f"sk{config['split_k']} w{config['num_warps']} s{config['num_stages']}")
    workspace = config.get("use_workspace")
    return (text + (" ws" if workspace else "")
            + (" unfused" if workspace and not config.get("fused_fixup", True) else "")
            + (" tma" if config.get("use_tma") else "")
            + (" swap" if config.get("swap_ab") else "")
            + (" pdl" if config.get("use_pdl") else ""))


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_mode_table(mode: str, cells: Sequence[CellResult],
                      vendor_names: Sequence[str] = (REFERENCE_VENDOR,)) -> str:
    """Plain-text table: shape x M with det us, torch us, ratio, floor ratio (+ vendors)."""
    others = [v for v in vendor_names if v != REFERENCE_VENDOR]
    header = (["shape", "N", "K", "M", "det us", "torch us", "ratio", "floor x"]
              + [f"{v} us" for v in others] + ["config"])
    rows = []
    for c in cells:
        det = "WRONG" if c.errors else _fmt(c.det_us)
        rows.append([c.shape.name, str(c.shape.n), str(c.shape.k), str(c.m), det,
                     _fmt(c.torch_us), _fmt(c.ratio, 3), _fmt(c.floor_ratio, 2)]
                    + [("ERR" if v in c.vendor_errors else _fmt(c.vendor_us.get(v)))
                       for v in others]
                    + [config_text(c.config)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    left = {0, len(header) - 1}

    def line(values):
        return "  ".join(v.ljust(w) if i in left else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [f"mode {mode}: {MODE_DESCRIPTIONS.get(mode, mode)}", line(header),
           line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    for c in cells:
        for err in c.errors:
            out.append(f"  ERROR {c.shape.name} M={c.m}: {err}")
        for name, err in c.vendor_errors.items():
            out.append(f"  vendor {name} {c.shape.name} M={c.m}: {err}")
    out.append(summarize(mode, cells).line())
    return "\n".join(out)


def format_markdown(run: "BenchRun") -> str:
    """Per mode: a shape x M grid of det/torch ratios (design.md's layout) and the details."""
    lines = ["# det-suite FP8 GEMM benchmark", ""]
    env = run.environment or {}
    lines.append(f"Machine: {env.get('machine', '?')}; torch {env.get('torch', '?')}, "
                 f"triton {env.get('triton', '?')}; policy: {run.policy_source}.")
    if run.copy_bandwidth:
        lines.append(f"Device-to-device copy: {run.copy_bandwidth / 1e12:.2f} TB/s "
                     "(bytes read + written); floor = FP8 weight bytes / that rate.")
    lines.append("")
    for mode, cells in run.cells.items():
        ms = sorted({c.m for c in cells})
        shapes = list(dict.fromkeys(c.shape for c in cells))
        by_key = {(c.shape, c.m): c for c in cells}
        lines += [f"## {mode}: {MODE_DESCRIPTIONS.get(mode, mode)}", "",
                  "det-suite time / torch._scaled_mm time:", "",
                  "| shape (N x K) | " + " | ".join(f"M={m}" for m in ms) + " |",
                  "| --- |" + " --- |" * len(ms)]
        for shape in shapes:
            cells_row = []
            for m in ms:
                c = by_key.get((shape, m))
                cells_row.append("WRONG" if c and c.errors else _fmt(c.ratio if c else None, 2))
            lines.append(f"| {shape.name} {shape.dims} | " + " | ".join(cells_row) + " |")
        lines += ["", summarize(mode, cells).line()]
        if mode in run.launch_floor_us:
            lines += ["", f"An empty kernel takes {run.launch_floor_us[mode]:.2f} us per call "
                          "in this mode (launch and timing overhead every cell includes)."]
        lines += ["", "<details><summary>cells</summary>",
                  "", "| shape | M | det us | torch us | ratio | floor x | config |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for c in cells:
            lines.append(f"| {c.shape.name} | {c.m} | {_fmt(c.det_us)} | {_fmt(c.torch_us)} | "
                         f"{_fmt(c.ratio, 3)} | {_fmt(c.floor_ratio, 2)} | "
                         f"{config_text(c.config)} |")
        lines += ["", "</details>", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ one cell

def measure_cell(shape: GemmShape, m: int, *, det_checked: Callable[[], torch.Tensor],
                 det_timed: Callable[[], torch.Tensor], det_config: dict | None,
                 vendors: dict[str, Callable[[], torch.Tensor]],
                 timers: dict[str, Callable[[Callable[[], Any]], float]],
                 floor_us: float | None) -> dict[str, CellResult]:
    """Check, then time, one (shape, M) cell in every mode of `timers`.

    Device-agnostic: the callables carry the operands. `det_checked` is det-suite's public
    path, `det_timed` the launch the timer repeats (must return the same bits);
    `vendors[REFERENCE_VENDOR]` is the reference every output is compared with.
    """
    import torch

    if REFERENCE_VENDOR not in vendors:
        raise ValueError(f"vendors must include the reference {REFERENCE_VENDOR!r}")
    results = {mode: CellResult(mode, shape, m, config=det_config, floor_us=floor_us)
               for mode in timers}
    errors: list[str] = []
    vendor_errors: dict[str, str] = {}
    det_ok = False
    ok_vendors = []
    accuracy = None
    try:
        ref = vendors[REFERENCE_VENDOR]()
        ok_vendors.append(REFERENCE_VENDOR)
    except Exception as exc:  # noqa: BLE001 - recorded in the report
        ref = None
        errors.append(f"reference {REFERENCE_VENDOR} failed: {type(exc).__name__}: {exc}")
    if ref is not None:
        try:
            det_out = det_checked()
            acc = check_accuracy(det_out, ref)
            accuracy = asdict(acc)
            if not acc.ok:
                errors.append(f"wrong result vs {REFERENCE_VENDOR}: {acc.reason}")
            else:
                timed_out = det_timed()
                if not torch.equal(timed_out, det_out):
                    errors.append("the timed launch does not return the bits the public "
                                  "fp8_scaled_mm returned for the same config")
                else:
                    det_ok = True
        except Exception as exc:  # noqa: BLE001
            errors.append(f"det-suite fp8_scaled_mm failed: {type(exc).__name__}: {exc}")
        for name, fn in vendors.items():
            if name == REFERENCE_VENDOR:
                continue
            try:
                acc = check_accuracy(fn(), ref)
            except Exception as exc:  # noqa: BLE001
                vendor_errors[name] = f"failed: {type(exc).__name__}: {exc}"
                continue
            if acc.ok:
                ok_vendors.append(name)
            else:
                vendor_errors[name] = f"wrong result vs {REFERENCE_VENDOR}: {acc.reason}"
    for mode, timer in timers.items():
        cell = results[mode]
        cell.accuracy = accuracy
        cell.errors = list(errors)
        cell.vendor_errors = dict(vendor_errors)
        if det_ok:
            try:
                cell.det_us = timer(det_timed)
            except Exception as exc:  # noqa: BLE001
                cell.errors.append(f"timing det-suite failed: {type(exc).__name__}: {exc}")
        for name in vendors:
            cell.vendor_us[name] = None
            if name not in ok_vendors:
                continue
            try:
                cell.vendor_us[name] = timer(vendors[name])
            except Exception as exc:  # noqa: BLE001
                message = f"timing failed: {type(exc).__name__}: {exc}"
                if name == REFERENCE_VENDOR:
                    cell.errors.append(f"{REFERENCE_VENDOR} {message}")
                else:
                    cell.vendor_errors[name] = message
    return results


# ------------------------------------------------------------------ the run

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
                  max_cell: float | None, max_floor_ratio: float | None = None) -> list[str]:
    """Speed gate (opt-in): which thresholds a mode's summary exceeds."""
    failures = []
    for mode, s in summaries.items():
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


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_gemm_bench(shapes: Sequence[GemmShape], ms: Sequence[int],
                   modes: Sequence[str] = DEFAULT_MODES, *, policy=None,
                   vendor_names: Sequence[str] | None = None, warmup_ms: float = 25.0,
                   rep_ms: float = 100.0, seed: int = 0, floor_max_m: int = FLOOR_MAX_M,
                   bandwidth: float | None = None,
                   progress: Callable[[str], None] = _stderr) -> BenchRun:
    """The benchmark on the current CUDA device (raises GpuRequired without one)."""
    import torch

    from det_suite.platform.family import device_family
    from det_suite.bench.timing import (copy_bandwidth, launch_floor_us, make_timer,
                                        require_gpu)
    from det_suite.ops import fp8_scaled_mm, launch_fp8_gemm
    from det_suite.policy import shipped_policy
    from det_suite.vendors import available_vendor_gemms

    require_gpu("bench gemm")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    device = torch.device("cuda", torch.cuda.current_device())
    available = available_vendor_gemms()
    if vendor_names is None:
        vendor_names = list(available)
    missing = [v for v in vendor_names if v not in available]
    if missing:
        raise ValueError(f"vendor(s) {', '.join(missing)} not available here; available: "
                         f"{', '.join(available)}")
    if REFERENCE_VENDOR not in vendor_names:
        vendor_names = [REFERENCE_VENDOR, *vendor_names]
    vendors = {name: available[name] for name in vendor_names}
    if policy is None:
        policy = shipped_policy(device_family(device))
    if bandwidth is None:
        bandwidth = copy_bandwidth()
        progress(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + written)")
    timers = {mode: make_timer(mode, warmup_ms=warmup_ms, rep_ms=rep_ms) for mode in modes}
    run = BenchRun(shapes=list(shapes), ms=list(ms), modes=list(modes),
                   vendors={n: v.description for n, v in vendors.items()},
                   policy_source=policy.source or "(in memory)", policy_family=policy.family,
                   copy_bandwidth=bandwidth,
                   settings={"warmup_ms": warmup_ms, "rep_ms": rep_ms, "seed": seed,
                             "floor_max_m": floor_max_m, "out_dtype": "bfloat16",
                             "bias": False},
                   cells={mode: [] for mode in modes})
    for mode, timer in timers.items():
        run.launch_floor_us[mode] = launch_floor_us(timer)
        progress(f"[{mode}] an empty kernel takes {run.launch_floor_us[mode]:.2f} us per call")
    out_dtype = torch.bfloat16
    gen = torch.Generator(device=device)
    for shape in shapes:
        n, k = shape.n, shape.k
        gen.manual_seed(seed * 1_000_003 + n * 31 + k)
        weight = random_fp8((n, k), generator=gen, device=device)
        w_kn = weight.t()  # (K, N) column-major view: the layout torch._scaled_mm wants
        a_scale = scale_tensor(1.0 / 16, device)
        w_scale = scale_tensor(1.0 / math.sqrt(k), device)
        for m in ms:
            a = random_fp8((m, k), generator=gen, device=device)
            config = policy.select(m, n, k)
            out = torch.empty((m, n), dtype=out_dtype, device=device)

            def det_checked(a=a):
                return fp8_scaled_mm(a, w_kn, a_scale, w_scale, out_dtype=out_dtype,
                                     weight_layout="kn", policy=policy)

            def det_timed(a=a, out=out, config=config):
                return launch_fp8_gemm(a, w_kn, a_scale, w_scale, None, out, config)

            vendor_calls = {name: (lambda fn=v.fn, a=a: fn(a, w_kn, a_scale, w_scale, None,
                                                              out_dtype))
                            for name, v in vendors.items()}
            floor = weight_floor_us(n, k, bandwidth) if m <= floor_max_m else None
            cells = measure_cell(shape, m, det_checked=det_checked, det_timed=det_timed,
                                 det_config=asdict(config), vendors=vendor_calls,
                                 timers=timers, floor_us=floor)
            for mode, cell in cells.items():
                run.cells[mode].append(cell)
                status = "WRONG" if cell.errors else f"{_fmt(cell.det_us)} us"
                progress(f"[{mode}] {shape.name} {shape.dims} M={m}: det {status}, torch "
                         f"{_fmt(cell.torch_us)} us, ratio {_fmt(cell.ratio, 3)} "
                         f"({config_text(cell.config)})")
        torch.cuda.empty_cache()
    return run
