"""Drive a matrix of cases over a set of providers; one progress line per case group.

On the CPU the interpreter's numerics are the GPU's (platform.gpu_faithful_interpreter,
installed by the interpreter switch): otherwise numpy's BLAS, not the kernel, would decide
what looks invariant. The run's notes say so.

Per case, each group of pipeline A/B arms (see providers.ab_groups) runs the cached-suffix
and batch-composition comparisons together, so every output of arm B is also compared with
arm A's on the same input without keeping more than one case's outputs. Graph cases run
after, one provider at a time (each capture holds its own static buffers).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from det_suite.invariance.cases import Case, Plan, make_problem
from det_suite.invariance.compare import Recorder, run_suffix_and_composition
from det_suite.invariance.graph import graph_unavailable, run_graph_replays
from det_suite.invariance.providers import Provider, ab_groups
from det_suite.platform import gpu_faithful_interpreter
from det_suite.platform.interpreter import interpreter_active

Progress = Callable[[str], None]


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class RunResult:
    providers: list[Provider]
    cases: tuple[Case, ...]
    graph_cases: tuple[Case, ...]
    plan: Plan
    device: str
    recorder: Recorder = field(default_factory=Recorder)
    graph_skipped: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def run(providers: list[Provider], cases, plan: Plan, device, *, graph_cases=(),
        progress: Progress | None = stderr_progress) -> RunResult:
    """Every comparison of `plan` for every case and provider. Provider failures are
    recorded in the result (recorder.errors), never raised."""
    device = str(torch.device(device))
    progress = progress or (lambda _line: None)
    result = RunResult(list(providers), tuple(cases), tuple(graph_cases), plan, device)
    # Positive controls are meant to differ: their share of a line's count is named.
    controls = {p.name for p in providers if p.expect_variant}
    rec = result.recorder
    if plan.graph_sizes and graph_cases:
        result.graph_skipped = graph_unavailable(device)
    elif graph_cases:
        result.graph_skipped = "no graph sizes in the plan"
    run_graphs = bool(graph_cases) and result.graph_skipped is None
    total = len(result.cases) + (len(result.graph_cases) if run_graphs else 0)
    groups = ab_groups(result.providers)
    started = time.perf_counter()
    step = 0
    if interpreter_active() and gpu_faithful_interpreter.installed():
        result.notes.append(gpu_faithful_interpreter.NOTE)
    with torch.no_grad():
        for case in result.cases:
            step += 1
            mark = _Mark(rec, controls)
            problem = make_problem(case, device)
            for arms in groups:
                run_suffix_and_composition(arms, case, problem, plan, rec, device)
            _synchronize(device)
            progress(mark.line(step, total, case.id))
        if run_graphs:
            for case in result.graph_cases:
                step += 1
                mark = _Mark(rec, controls)
                problem = make_problem(case, device)
                for provider in result.providers:
                    if provider.graph_capturable:
                        run_graph_replays(provider, case, problem, plan, rec, device)
                progress(mark.line(step, total, f"graph {case.id}"))
        elif graph_cases:
            progress(f"CUDA Graph replay skipped: {result.graph_skipped}")
    result.seconds = time.perf_counter() - started
    return result


class _Mark:
    """Counts and time at the start of a case group, for its progress line."""

    def __init__(self, rec: Recorder, controls=frozenset()) -> None:
        self.rec, self.controls = rec, controls
        self.comparisons = len(rec.comparisons)
        self.errors = len(rec.errors)
        self.time = time.perf_counter()

    def line(self, step: int, total: int, what: str) -> str:
        new = self.rec.comparisons[self.comparisons:]
        differ = sum(1 for c in new if not c.equal)
        control = [c for c in new if c.provider in self.controls]
        errors = len(self.rec.errors) - self.errors
        text = (f"[{step}/{total}] {what}: {len(new)} comparisons, {differ} differ"
                + (f" (positive control: {len(control)} comparisons, "
                   f"{sum(1 for c in control if not c.equal)} differ)"
                   if control else "")
                + (f", {errors} provider errors" if errors else "")
                + f" ({time.perf_counter() - self.time:.1f} s)")
        return text
