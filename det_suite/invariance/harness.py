"""The invariance harness as a library call: settings in, a result object out.

`det-suite invariance` parses its arguments into `InvarianceSettings` and calls
`run_invariance`; `det-suite run` and tests call it directly, without an argv round trip.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

from det_suite.platform.interpreter import interpreter_active, interpreter_for_cpu_run

Mode = Literal["quick", "full"]


class UsageError(ValueError):
    """Settings that cannot run here: an unknown provider or shape, a bad device."""


@dataclass(frozen=True)
class InvarianceSettings:
    out: str = "results/invariance"             # beside `det-suite run`'s results/run
    providers: Sequence[str] = ("auto",)
    shapes: Sequence[str] | None = None        # default: "gpu" when full, "cpu" when quick
    suffix_ms: Sequence[int] | None = None     # cached-suffix lengths; default from the tables
    m_full: int | None = None                  # default 8192 full, 130 quick
    mode: Mode | None = None                   # default: full on a GPU, quick elsewhere
    dtypes: Sequence[str] = ("bf16", "fp16")
    seeds: Sequence[int] = (0, 1)
    graph: bool = True
    no_claim: Sequence[str] = ()
    claim: Sequence[str] = ()
    expect_variant: Sequence[str] = ()
    device: str | None = None                  # default: cuda when present
    heatmap: bool = True
    instruction_table: bool = True
    quiet: bool = False
    command: Sequence[str] = field(default_factory=lambda: list(sys.argv))  # recorded only


@dataclass
class InvarianceRun:
    exit_code: int       # 0 invariant and controls flagged, 1 otherwise
    payload: dict        # what invariance.json holds
    table: str           # the provider x shape x M class table, as printed
    paths: dict          # report kind -> path written
    notes: list[str]     # e.g. why the heatmap was skipped
    seconds: float


def prepare_device(requested: str | None) -> str:
    """Pick the device; on a machine without CUDA make sure kernels run on the interpreter
    (it must be chosen before det_suite.kernels is imported, which happens after this)."""
    import torch

    if requested is None:
        requested = "cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu"
    if requested not in ("cuda", "cpu") and not requested.startswith("cuda:"):
        raise UsageError(f"--device must be cuda or cpu; got {requested!r}")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda, but torch sees no CUDA device")
    if requested == "cpu":
        try:
            interpreter_for_cpu_run("det-suite invariance: no GPU in use; TRITON_INTERPRET=1 "
                                    "set (kernels run on the Triton interpreter)")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return requested


def run_invariance(settings: InvarianceSettings,
                   progress: Callable[[str], None] | None = None) -> InvarianceRun:
    """Run the matrix the settings describe and write its reports into `settings.out`.
    Raises UsageError before anything runs when the settings cannot run here. `progress`
    defaults to lines on stderr unless `settings.quiet`."""
    started = time.perf_counter()
    device = prepare_device(settings.device)

    from det_suite.invariance import cases as cases_mod
    from det_suite.invariance import providers as providers_mod
    from det_suite.invariance import report, runner, verdict
    from det_suite.reports.environment import environment

    full = settings.mode == "full" or (settings.mode is None and device.startswith("cuda"))
    dtypes, seeds = tuple(settings.dtypes), tuple(settings.seeds)
    try:
        shapes = cases_mod.parse_shapes(settings.shapes or (["gpu"] if full else ["cpu"]))
        m_full = settings.m_full or (8192 if full else 130)
        suffix_ms = list(settings.suffix_ms) if settings.suffix_ms else None
        if suffix_ms:
            if min(suffix_ms) < 1:
                raise ValueError("--m values must be >= 1")
            m_full = max(m_full, max(suffix_ms))
        make_plan = cases_mod.full_plan if full else cases_mod.quick_plan
        plan = make_plan(m_full=m_full, suffix_ms=suffix_ms, graph=settings.graph)
        make_matrix = cases_mod.full_matrix if full else cases_mod.quick_matrix
        cases = make_matrix(shapes, dtypes, seeds)
        graph_cases = cases_mod.graph_matrix(shapes, dtypes, seeds) if settings.graph else ()
        selection = providers_mod.resolve(list(settings.providers), device,
                                          no_claim=list(settings.no_claim),
                                          claim=list(settings.claim),
                                          expect_variant=list(settings.expect_variant))
    except (ValueError, TypeError, ImportError) as exc:
        raise UsageError(str(exc)) from exc
    if not selection.providers:
        raise UsageError("no provider can run here: " + "; ".join(
            f"{p.name}: {p.unavailable}" for p in selection.skipped))

    env = environment()
    if progress is None and not settings.quiet:
        progress = runner.stderr_progress
    if progress:
        # Graph cases run only on a CUDA device (the runner skips them elsewhere and says
        # so): announce only the cases that will run.
        graphs = (f" + {len(graph_cases)} graph cases"
                  if graph_cases and device.startswith("cuda") else "")
        progress(f"det-suite invariance on {env['machine']}: {'full' if full else 'quick'} "
                 f"matrix, {len(cases)} cases{graphs}, providers "
                 + ", ".join(p.name for p in selection.providers))
        for p in selection.skipped:
            progress(f"  skipped {p.name}: {p.unavailable}")
    result = runner.run(selection.providers, cases, plan, device, graph_cases=graph_cases,
                        progress=progress)
    all_verdicts = verdict.verdicts(selection.providers, result.recorder)
    code = verdict.exit_code(all_verdicts)
    families = [p.family for p in selection.providers if p.family]
    instructions = (report.instruction_table(families) if settings.instruction_table
                    else {"available": False, "reason": "--no-instruction-table"})
    config = {"command": list(settings.command), "mode": "full" if full else "quick",
              "device": device, "providers_requested": list(settings.providers),
              "shapes": [s.__dict__ for s in shapes], "dtypes": list(dtypes),
              "seeds": list(seeds), "no_claim": list(settings.no_claim),
              "claim": list(settings.claim), "expect_variant": list(settings.expect_variant)}
    payload = report.build_payload(result, all_verdicts, env, config,
                                   skipped=selection.skipped, instructions=instructions,
                                   exit_code=code)
    table = report.format_table(payload)
    paths, notes = report.write_reports(settings.out, payload, heatmap=settings.heatmap)
    return InvarianceRun(exit_code=code, payload=payload, table=table, paths=paths,
                         notes=list(notes), seconds=time.perf_counter() - started)
