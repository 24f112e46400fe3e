"""The tuner: settings, the three-stage search per (N, K) under a time budget, and what it
found per shape (the search is described in det_suite/tune/__init__.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from det_suite.bench.gemm import GemmShape
from det_suite.invariance.compare import forced_configs
from det_suite.platform.family import validate_family
from det_suite.policy.tiles import promotion_k
from det_suite.policy import SUPPORTED_STAGES, TableEntry, entry_json, m_tile_text
from det_suite.tune.m_classes import build_m_tiles, make_entry, rank_reductions
from det_suite.tune.precompile import GemmLaunch, precompile_launches, stderr_log
from det_suite.tune.prove import (CHECK_BIG_M, CHECK_DATA, CHECK_MS, CHECK_STAGES,
                                  CHECK_SUBSETS, CheckResult, check_entry)
from det_suite.tune.space import (BLOCK_K_CHOICES, BLOCK_N_CHOICES, CLASS_MS, GROUP_M,
                                  SCREEN_MS, SPLIT_K_CHOICES, STAGE_CHOICES, WARP_CHOICES,
                                  Reduction, Variant, axis_variants, combine_axes,
                                  launch_config, order_reductions, reduction_candidates,
                                  representative_variant)

CHECK_RESERVE = 0.25   # share of a shape's budget kept for proving the chosen entry
SCREEN_SHARE = 0.5     # stage 1 may use at most this share of a shape's search budget
# The first shape compiles most kernels the later ones reuse (N and K are runtime
# arguments): on the 8 Qwen3 shapes ~80% of the distinct compiles fall in the first.
FIRST_SHAPE_WEIGHT = 2.0

Measure = Callable[[Reduction, Variant, int, int, int], "float | None"]
Checker = Callable[[TableEntry, int, int], CheckResult]


@dataclass
class TuneSettings:
    family: str
    screen_ms: tuple[int, ...] = SCREEN_MS
    class_ms: tuple[int, ...] = CLASS_MS
    block_ns: tuple[int, ...] = BLOCK_N_CHOICES
    # None: the family's FP32 promotion interval where it has one, else BLOCK_K_CHOICES.
    block_ks: tuple[int, ...] | None = None
    split_ks: tuple[int, ...] = SPLIT_K_CHOICES
    warps: tuple[int, ...] = WARP_CHOICES
    stages: tuple[int, ...] = STAGE_CHOICES
    keep: int = 3
    budget_s: float = 300.0
    check_ms: tuple[int, ...] = CHECK_MS
    check_big_m: int = CHECK_BIG_M
    check_stages: tuple[int, ...] = CHECK_STAGES
    check_subsets: tuple[str, ...] = CHECK_SUBSETS
    check_data: tuple[str, ...] = CHECK_DATA
    tma: bool = True
    warmup_ms: float = 5.0
    rep_ms: float = 20.0
    seed: int = 0
    group_m: int = GROUP_M
    parallel_compile: bool = True
    compile_workers: int | None = None

    def validate(self) -> "TuneSettings":
        validate_family(self.family)
        problems = []
        promote = promotion_k(self.family)
        if self.block_ks is None:
            self.block_ks = (promote,) if promote else BLOCK_K_CHOICES
        elif promote and any(int(b) % promote for b in self.block_ks):
            problems.append(f"block_ks must be multiples of {self.family}'s FP32 promotion "
                            f"interval ({promote}); got {list(self.block_ks)}")
        for name in ("screen_ms", "class_ms", "block_ns", "block_ks", "split_ks", "warps",
                     "stages", "check_ms"):
            values = getattr(self, name)
            if not values or any(int(v) < 1 for v in values):
                problems.append(f"{name} must be non-empty positive integers")
        for name in ("block_ns", "block_ks", "warps"):
            if any(v & (v - 1) for v in getattr(self, name)):
                problems.append(f"{name} must be powers of two")
        if any(b < 32 for b in self.block_ks):
            problems.append("block_ks must be >= 32 (one FP8 MMA step)")
        for name in ("stages", "check_stages"):
            bad = [s for s in getattr(self, name) if s not in SUPPORTED_STAGES]
            if bad:
                problems.append(f"{name} {bad} not in {SUPPORTED_STAGES}")
        if not self.check_subsets or any(x not in CHECK_SUBSETS for x in self.check_subsets):
            problems.append(f"check_subsets must be drawn from {CHECK_SUBSETS}")
        if not self.check_data or any(x not in CHECK_DATA for x in self.check_data):
            problems.append(f"check_data must be drawn from {CHECK_DATA}")
        if self.check_ms and max(self.check_ms) >= self.check_big_m:
            problems.append("check_big_m must exceed every check_ms value")
        if self.keep < 1:
            problems.append("keep must be >= 1")
        if self.budget_s <= 0:
            problems.append("budget_s must be positive")
        if problems:
            raise ValueError("; ".join(problems))
        return self


@dataclass
class ShapeOutcome:
    shape: GemmShape
    entry: TableEntry | None
    status: str                      # "tuned" | "single-variant" | "base"
    chosen: str | None
    score: float | None
    screened: list[str]
    finalists: list[str]
    timings_us: dict[str, dict[int, dict[str, float | None]]]
    best_us: dict[int, float]
    rejected: list[dict]
    comparisons: int
    elapsed_s: float
    budget_s: float
    truncated: bool

    def to_json(self) -> dict:
        return {
            "shape": self.shape.name, "n": self.shape.n, "k": self.shape.k,
            "status": self.status, "chosen": self.chosen, "score": self.score,
            "entry": entry_json(self.entry) if self.entry else None,
            "best_us": {str(m): t for m, t in self.best_us.items()},
            "screened": self.screened, "finalists": self.finalists,
            "invariance_comparisons": self.comparisons,
            "elapsed_s": round(self.elapsed_s, 2), "budget_s": round(self.budget_s, 2),
            "truncated_by_budget": self.truncated,
            "timings_us": {red: {str(m): per_m for m, per_m in by_m.items()}
                           for red, by_m in self.timings_us.items()},
        }


class Tuner:
    """Tunes one family's entries on one device. `measure` (red, var, m, n, k) -> us or
    None, and `check` (entry, n, k) -> CheckResult are injectable (tests); by default they
    time and check on `device` for real. `clock` is injectable for budget tests."""

    def __init__(self, settings: TuneSettings, *, device=None, measure: Measure | None = None,
                 check: Checker | None = None, log: Callable[[str], None] = stderr_log,
                 clock: Callable[[], float] = time.monotonic, sm_count: int | None = None):
        self.settings = settings.validate()
        self.device = device
        self.measure = measure or self._gpu_measure
        self.check = check or self._default_check
        self.log = log
        self.clock = clock
        self.sm_count = sm_count or self._sm_count()
        self._operands: dict[tuple, Any] = {}
        self._operands_shape: tuple[int, int] | None = None
        self._progress = ""
        self._started = clock()

    # ---------------------------------------------------------------- real device hooks

    def _sm_count(self) -> int:
        try:
            import torch

            if self.device is not None and torch.device(self.device).type == "cuda":
                return torch.cuda.get_device_properties(self.device).multi_processor_count
        except Exception:  # noqa: BLE001
            pass
        return 132  # H100/H200

    def _gemm_operands(self, n: int, k: int, m: int):
        import torch

        from det_suite.bench.gemm import random_fp8, scale_tensor

        if self._operands_shape != (n, k):
            self._operands.clear()
            if self.device is not None and torch.device(self.device).type == "cuda":
                torch.cuda.empty_cache()
            self._operands_shape = (n, k)
            gen = torch.Generator(device=self.device)
            gen.manual_seed(self.settings.seed * 7919 + n * 31 + k)
            w = random_fp8((n, k), generator=gen, device=self.device)
            self._operands["w"] = (w, scale_tensor(1.0 / 16, self.device),
                                   scale_tensor(1.0 / math.sqrt(k), self.device), gen)
        if m not in self._operands:
            gen = self._operands["w"][3]
            a = random_fp8((m, k), generator=gen, device=self.device)
            out = torch.empty((m, n), dtype=torch.bfloat16, device=self.device)
            self._operands[m] = (a, out)
        w, a_scale, w_scale, _ = self._operands["w"]
        a, out = self._operands[m]
        return a, w.t(), a_scale, w_scale, out

    def _launcher(self, red: Reduction, var: Variant, m: int, n: int,
                  k: int) -> GemmLaunch:
        a, w_kn, a_scale, w_scale, out = self._gemm_operands(n, k, m)
        return GemmLaunch(a, w_kn, a_scale, w_scale, out,
                          launch_config(red, var, self.settings.group_m,
                                        promote_k=promotion_k(self.settings.family)))

    def _gpu_measure(self, red: Reduction, var: Variant, m: int, n: int, k: int):
        import torch

        from det_suite.bench.timing import flushed_median_us

        fn = self._launcher(red, var, m, n, k)
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: not a candidate
            self.log(f"{self._progress} {red.key} {var.key} M={m}: cannot launch "
                     f"({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
            return None
        return flushed_median_us(fn, warmup_ms=self.settings.warmup_ms,
                                 rep_ms=self.settings.rep_ms)

    def _default_check(self, entry: TableEntry, n: int, k: int) -> CheckResult:
        s = self.settings
        return check_entry(entry, n, k, device=self.device, check_ms=s.check_ms,
                           big_m=s.check_big_m, stages=s.check_stages,
                           subsets=s.check_subsets, data=s.check_data, seed=s.seed)

    def _precompile(self, jobs: Sequence[tuple[Reduction, Variant, int]], n: int, k: int):
        if not self.settings.parallel_compile or self.measure != self._gpu_measure:
            return
        from det_suite.platform.interpreter import interpreter_active

        if interpreter_active():
            return
        t0 = self.clock()
        calls = [self._launcher(red, var, m, n, k) for red, var, m in jobs]
        if precompile_launches(calls, workers=self.settings.compile_workers, log=self.log):
            self.log(f"{self._progress} compiled {len(calls)} launch configs in parallel "
                     f"({self.clock() - t0:.1f}s)")

    def _precompile_check(self, entry: TableEntry, n: int, k: int) -> None:
        """Compile what the default check will launch, in parallel: every forced config at
        each row-count specialization the check's m values fall into (Triton specializes
        integer arguments on divisibility by 16: m = 1, 7, 16 stand for all of them)."""
        if self.check != self._default_check or not self.settings.parallel_compile:
            return
        import torch

        from det_suite.platform.interpreter import interpreter_active

        if interpreter_active() or self.device is None \
                or torch.device(self.device).type != "cuda":
            return
        s = self.settings
        configs = forced_configs(entry, s.check_stages)
        calls = []
        for m in (1, 7, 16):
            for config in configs:
                a, w_kn, a_scale, w_scale, out = self._gemm_operands(n, k, m)
                calls.append(GemmLaunch(a, w_kn, a_scale, w_scale, out, config))
        t0 = self.clock()
        if precompile_launches(calls, workers=s.compile_workers, log=self.log):
            self.log(f"{self._progress} compiled {len(calls)} check launches in parallel "
                     f"({self.clock() - t0:.1f}s)")

    # ---------------------------------------------------------------- search

    def tune(self, shapes: Sequence[GemmShape]) -> list[ShapeOutcome]:
        self._started = self.clock()
        outcomes = []
        weights = [FIRST_SHAPE_WEIGHT] + [1.0] * (len(shapes) - 1)
        for index, shape in enumerate(shapes):
            spent = self.clock() - self._started
            share = (max(0.0, self.settings.budget_s - spent) * weights[index]
                     / sum(weights[index:]))
            self._progress = f"[tune {index + 1}/{len(shapes)} {shape.name} {shape.dims}]"
            outcomes.append(self.tune_shape(shape, share))
        return outcomes

    def tune_shape(self, shape: GemmShape, budget_s: float) -> ShapeOutcome:
        s = self.settings
        n, k = shape.n, shape.k
        start = self.clock()
        search_s = budget_s * (1.0 - CHECK_RESERVE)
        deadline = start + search_s
        times: dict[Reduction, dict[int, dict[Variant, float | None]]] = {}
        truncated = False

        def record(red: Reduction, var: Variant, m: int, stage: str) -> None:
            per_m = times.setdefault(red, {}).setdefault(m, {})
            if var in per_m:
                return
            t = self.measure(red, var, m, n, k)
            per_m[var] = t
            used = self.clock() - self._started
            self.log(f"{self._progress} {stage} {red.key} M={m} {var.key}: "
                     f"{'failed' if t is None else f'{t:.1f} us'} "
                     f"({used:.0f}s of {s.budget_s:.0f}s)")

        # 1. screen every reduction with one representative variant per M
        reds = order_reductions(reduction_candidates(n, k, block_ns=s.block_ns,
                                                     block_ks=s.block_ks, split_ks=s.split_ks,
                                                     sm_count=self.sm_count),
                                n, self.sm_count)
        if not reds:
            raise ValueError(f"no reduction candidates for {n}x{k} (K too small for "
                             f"BLOCK_K {s.block_ks}?)")
        screen_ms = sorted(set(s.screen_ms))
        screened: list[Reduction] = []
        batch = 6
        for first in range(0, len(reds), batch):
            if screened and self.clock() > start + SCREEN_SHARE * search_s:
                truncated = True
                break
            chunk = reds[first:first + batch]
            jobs = [(red, self._representative(m, red), m) for red in chunk for m in screen_ms]
            self._precompile(jobs, n, k)
            for red in chunk:
                if screened and self.clock() > start + SCREEN_SHARE * search_s:
                    truncated = True
                    break
                for m in screen_ms:
                    record(red, self._representative(m, red), m, "screen")
                screened.append(red)
        screen_best = {red: {m: self._best_time(times, red, m) for m in screen_ms}
                       for red in screened}
        ranked = [(r, sc) for r, sc in rank_reductions(screen_best, screen_ms)
                  if math.isfinite(sc)]
        finalists = [r for r, _ in ranked[: s.keep]]
        if not finalists:
            raise RuntimeError(f"{n}x{k}: no reduction candidate could be timed at every "
                               f"screening M {screen_ms}")

        # 2. sweep variants around the representative, per class M, for each finalist
        class_ms = sorted(set(s.class_ms))
        swept: list[Reduction] = []
        for red in finalists:
            if swept and self.clock() > deadline:
                truncated = True
                break
            starts = {m: self._representative(m, red) for m in class_ms}
            axes = {m: axis_variants(starts[m], s.family, m, red, warps=s.warps,
                                     stages=s.stages, tma=s.tma) for m in class_ms}
            self._precompile([(red, v, m) for m in class_ms for v in axes[m]], n, k)
            for m in class_ms:
                for var in axes[m]:
                    record(red, var, m, "sweep")
            combos = {m: combine_axes(starts[m], {v: times[red][m].get(v) for v in axes[m]})
                      for m in class_ms}
            self._precompile([(red, combos[m], m) for m in class_ms
                              if combos[m] not in times[red][m]], n, k)
            for m in class_ms:
                record(red, combos[m], m, "combine")
            swept.append(red)

        # 3. rank the swept finalists on class_ms; prove and store the best that passes
        final_ms = class_ms if swept else screen_ms
        pool = swept or finalists
        final_best = {red: {m: self._best_time(times, red, m) for m in final_ms}
                      for red in pool}
        final_ranked = [(r, sc) for r, sc in rank_reductions(final_best, final_ms)
                        if math.isfinite(sc)]
        rejected: list[dict] = []
        comparisons = 0
        chosen: tuple[TableEntry, Reduction, float, str] | None = None
        for red, score in final_ranked:
            best_vars = {m: self._best_variant(times, red, m) for m in final_ms}
            entry = make_entry(n, k, red, build_m_tiles(best_vars), s.group_m)
            result = self._checked(entry, n, k, red, rejected, "tuned")
            comparisons += result.comparisons
            if result.passed:
                chosen = (entry, red, score, "tuned")
                break
        if chosen is None and final_ranked:
            # One variant for every M: nothing in the launch depends on M at all.
            red, score = final_ranked[0]
            var = self._best_variant(times, red, final_ms[-1])
            var = replace(var, use_workspace=False)
            entry = make_entry(n, k, red, (var.tile(None),), s.group_m)
            result = self._checked(entry, n, k, red, rejected, "single-variant")
            comparisons += result.comparisons
            if result.passed:
                chosen = (entry, red, score, "single-variant")
        best_us = {}
        for m in final_ms:
            valid = [final_best[r][m] for r in final_best if final_best[r][m] is not None]
            if valid:
                best_us[m] = min(valid)
        if chosen is None:
            self.log(f"{self._progress} every candidate was rejected; {n}x{k} keeps the base "
                     "table's entry")
        else:
            self.log(f"{self._progress} chosen {chosen[1].key} ({chosen[3]}): "
                     + ", ".join(m_tile_text(t) for t in chosen[0].m_tiles))
        return ShapeOutcome(
            shape=shape, entry=chosen[0] if chosen else None,
            status=chosen[3] if chosen else "base",
            chosen=chosen[1].key if chosen else None, score=chosen[2] if chosen else None,
            screened=[r.key for r in screened], finalists=[r.key for r in finalists],
            timings_us={red.key: {m: {v.key: t for v, t in per_m.items()}
                                  for m, per_m in by_m.items()}
                        for red, by_m in times.items()},
            best_us=best_us, rejected=rejected, comparisons=comparisons,
            elapsed_s=self.clock() - start, budget_s=budget_s, truncated=truncated)

    def _checked(self, entry: TableEntry, n: int, k: int, red: Reduction,
                 rejected: list[dict], status: str) -> CheckResult:
        self._precompile_check(entry, n, k)
        result = self.check(entry, n, k)
        if result.passed:
            self.log(f"{self._progress} {red.key} ({status}) passed: {result.comparisons} "
                     "bitwise comparisons")
        else:
            failure = result.failure
            self.log(f"{self._progress} REJECTED {red.key} ({status}): {failure.kind} at "
                     f"m={failure.m} ({failure.subset} rows, {failure.data} data): "
                     f"{failure.detail}")
            rejected.append({"n": n, "k": k, "reduction": red.key, "candidate": status,
                             "entry": entry_json(entry),
                             "first_differing_m": result.first_differing_m,
                             "failure": failure.to_json()})
        return result

    def _representative(self, m: int, red: Reduction) -> Variant:
        s = self.settings
        return representative_variant(s.family, m, red, warps=s.warps, stages=s.stages)

    @staticmethod
    def _best_time(times, red: Reduction, m: int) -> float | None:
        valid = [t for t in times.get(red, {}).get(m, {}).values() if t is not None]
        return min(valid) if valid else None

    @staticmethod
    def _best_variant(times, red: Reduction, m: int) -> Variant:
        per_m = {v: t for v, t in times[red][m].items() if t is not None}
        return min(per_m, key=lambda v: (per_m[v], v))
