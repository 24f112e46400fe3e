"""`det-suite bench gemm` as a library call: a `GemmBenchSettings` in, a `GemmBenchResult`
out. The command (det_suite/commands/bench.py) parses its arguments into the settings,
calls `bench_gemm`, prints the tables and writes the reports; tests and other commands call
it without an argv round trip."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from det_suite.bench import MODES
from det_suite.bench.gemm.pinned import config_fields, config_policy, parse_config_spec
from det_suite.bench.gemm.render import format_markdown, format_mode_table
from det_suite.bench.gemm.results import (FLOOR_GATE_MAX_M, FLOOR_MAX_M, BenchRun,
                                          gate_failures)
from det_suite.bench.gemm.run import DEFAULT_MODES, progress_to_stderr, run_gemm_bench
from det_suite.bench.gemm.shapes import DEFAULT_MS, GemmShape, parse_ms, parse_shapes


class BenchUsageError(ValueError):
    """Settings that cannot run: a bad shape, M, mode, gate mode, pinned config or policy
    file, or a vendor not available here. Raised before anything is timed; the command
    prints it after 'det-suite bench gemm: ' and exits 2."""


@dataclass(frozen=True)
class GemmBenchSettings:
    shapes: Sequence[str] = ("qwen3-8b",)       # presets or N,K / NxK / NAME=N,K
    ms: Sequence[int] = DEFAULT_MS              # row counts
    modes: Sequence[str] | None = None          # timing modes; default DEFAULT_MODES
    policy_file: str | None = None              # default: the shipped table of this family
    config: str | Mapping | None = None         # one pinned launch config (--config text or
                                                # its fields); overrides policy_file
    vendors: Sequence[str] | None = None        # default: all available (+ the reference)
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    seed: int = 0
    floor_max_m: int = FLOOR_MAX_M              # weight-bytes floor ratio for M up to this
    max_geomean: float | None = None            # gates (opt-in), per gated mode
    max_cell: float | None = None
    max_floor_ratio: float | None = None        # judged on M <= FLOOR_GATE_MAX_M
    gate_modes: Sequence[str] | None = None     # default: every mode run
    fp64_error: bool = False                    # probe each cell's error against fp64
    max_error_ratio: float | None = None        # gate: det / cuBLAS-default fp64 error


@dataclass(frozen=True)
class GemmBenchPlan:
    """The settings checked and expanded; what `bench_gemm` runs."""
    shapes: list[GemmShape]
    ms: list[int]
    modes: list[str]
    gate_modes: list[str]
    config_fields: dict | None  # the pinned launch config, every field filled


@dataclass
class GemmBenchResult:
    run: BenchRun               # cells, summaries, environment
    gate_modes: list[str]
    gate_failures: list[str]    # empty when no gate is set or every gate held
    payload: dict               # the JSON report: run.to_json() plus "gate"

    @property
    def failed(self) -> bool:
        """A det-suite result was wrong or errored (no time was reported for it)."""
        return self.run.failed

    @property
    def ok(self) -> bool:
        return not self.failed and not self.gate_failures

    def tables(self) -> list[str]:
        """One aligned text table per mode, as the command prints them."""
        vendor_names = list(self.run.vendors)
        return [format_mode_table(mode, self.run.cells[mode], vendor_names)
                for mode in self.run.modes]

    def markdown(self) -> str:
        return format_markdown(self.run)


def plan_gemm_bench(settings: GemmBenchSettings) -> GemmBenchPlan:
    """Check and expand the settings; needs no GPU. Raises BenchUsageError."""
    try:
        shapes = parse_shapes(settings.shapes)
        ms = parse_ms(settings.ms)
        config = settings.config
        fields = (None if config is None else parse_config_spec(config)
                  if isinstance(config, str) else config_fields(config))
    except ValueError as exc:
        raise BenchUsageError(str(exc)) from exc
    modes = list(dict.fromkeys(settings.modes or DEFAULT_MODES))
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise BenchUsageError(f"mode {bad[0]!r} is not one of {', '.join(MODES)}")
    gated = list(dict.fromkeys(settings.gate_modes or modes))
    unknown = [m for m in gated if m not in modes]
    if unknown:
        raise BenchUsageError(f"--gate-mode {' '.join(unknown)} is not among the modes run "
                              f"({' '.join(modes)})")
    return GemmBenchPlan(shapes, ms, modes, gated, fields)


def bench_gemm(settings: GemmBenchSettings, *,
               progress: Callable[[str], None] = progress_to_stderr) -> GemmBenchResult:
    """The benchmark the settings describe, on the current CUDA device; writes nothing.

    Raises BenchUsageError (bad settings, before any GPU work) and bench.timing.GpuRequired
    (no usable CUDA GPU) before anything is timed; errors while running (e.g. a CUDA error)
    propagate. A wrong det-suite result is not raised: it is in `result.failed`."""
    plan = plan_gemm_bench(settings)

    from det_suite.bench.timing import require_gpu

    require_gpu("bench gemm")

    import torch

    from det_suite.ops.linear import device_policy
    from det_suite.platform.family import device_family
    from det_suite.policy import load_policy_file
    from det_suite.reports.environment import environment

    family = device_family()
    try:
        if plan.config_fields is not None:
            policy = config_policy(plan.config_fields, family)
        elif settings.policy_file:
            # A user's table serves this device: shapes it does not name take the rule.
            policy = device_policy(torch.device("cuda"), load_policy_file(settings.policy_file))
        else:
            policy = None
    except (OSError, ValueError, KeyError) as exc:
        raise BenchUsageError(f"cannot load the policy: {exc}") from exc
    if policy is not None and policy.family != family:
        progress(f"warning: policy {policy.source} is for {policy.family}, this GPU is "
                 f"{family}; its invariance was not proven here")
    try:
        run = run_gemm_bench(plan.shapes, plan.ms, plan.modes, policy=policy,
                             vendor_names=settings.vendors, warmup_ms=settings.warmup_ms,
                             rep_ms=settings.rep_ms, seed=settings.seed,
                             floor_max_m=settings.floor_max_m, progress=progress,
                             fp64_error=settings.fp64_error or settings.max_error_ratio
                             is not None)
    except ValueError as exc:
        raise BenchUsageError(str(exc)) from exc
    run.environment = environment()
    failures = gate_failures({m: s for m, s in run.summaries().items() if m in plan.gate_modes},
                             max_geomean=settings.max_geomean, max_cell=settings.max_cell,
                             max_floor_ratio=settings.max_floor_ratio,
                             max_error_ratio=settings.max_error_ratio)
    payload = run.to_json()
    payload["gate"] = {"max_geomean": settings.max_geomean, "max_cell": settings.max_cell,
                       "max_floor_ratio": settings.max_floor_ratio,
                       "max_error_ratio": settings.max_error_ratio,
                       "modes": list(plan.gate_modes), "floor_gate_max_m": FLOOR_GATE_MAX_M,
                       "failures": failures}
    return GemmBenchResult(run, list(plan.gate_modes), failures, payload)
