"""CUDA Graph replay against eager, the way an engine serves padded batches.

An engine captures one graph per padded batch size B and serves a batch of m <= B rows by
writing them into the graph's static input (the rest is padding left over from earlier
batches) and replaying. Batch invariance requires the real rows of the replay to equal an
eager call on exactly those m rows. For each B this captures a graph on a static buffer,
then for each replay writes fresh rows (m = B, and the fewest rows that pad to B) plus
fresh garbage padding into it, replays, and compares the first m output rows with eager.

Triton compiles a kernel per specialization (M == 1, M % 16 == 0, ... are part of the key),
so each size is warmed up on its own static buffer before capture; a capture that still
compiles something means the warm-up missed a specialization and the graph may hold a
launch that was never run eagerly: that is recorded as an error, not compared.
"""

from __future__ import annotations

import torch

from det_suite.platform.family import interpreter_active
from det_suite.invariance.cases import Case, Plan, Problem, apply_layout, make_rows, take_rows
from det_suite.invariance.compare import Recorder, compare
from det_suite.invariance.providers import Provider

WARMUP_CALLS = 2


def graph_unavailable(device) -> str | None:
    """Why CUDA Graph replay cannot run on `device` (None: it can)."""
    if torch.device(device).type != "cuda":
        return "CUDA Graph replay needs a CUDA device (this run is on the CPU)"
    if interpreter_active():
        return "CUDA Graph replay cannot capture the Triton interpreter (TRITON_INTERPRET set)"
    return None


class CompileWatch:
    """Counts Triton JIT compiles while active, through Triton's post-compile hook (chained
    to any hook already installed). `active` is False on a Triton without the hook."""

    def __init__(self) -> None:
        self.compiled: list[str] = []
        self.active = False
        self._runtime = None
        self._previous = None

    def __enter__(self) -> "CompileWatch":
        try:
            from triton import knobs
            runtime = knobs.runtime
            self._previous = runtime.jit_post_compile_hook
        except (ImportError, AttributeError):
            return self
        previous = self._previous

        def hook(**kwargs):
            self.compiled.append(str(kwargs.get("repr", "?")))
            return previous(**kwargs) if previous is not None else None

        runtime.jit_post_compile_hook = hook
        self._runtime, self.active = runtime, True
        return self

    def __exit__(self, *exc) -> None:
        if self._runtime is not None:
            self._runtime.jit_post_compile_hook = self._previous
        self._runtime = None


def compile_watch_available() -> bool:
    with CompileWatch() as watch:
        return watch.active


def padded_row_counts(sizes) -> list[tuple[int, tuple[int, ...]]]:
    """For each capture size B: the real row counts replayed into it, B itself and the
    fewest rows a batch padded up to B can hold (one more than the previous size)."""
    out, previous = [], 0
    for size in sorted(set(sizes)):
        out.append((size, tuple(sorted({size, previous + 1}))))
        previous = size
    return out


def _write_rows(static_x: torch.Tensor, rows: torch.Tensor) -> None:
    static_x.copy_(rows.reshape(static_x.shape))


def run_graph_replays(provider: Provider, case: Case, problem: Problem, plan: Plan,
                      rec: Recorder, device) -> None:
    """Capture at every plan.graph_sizes, replay plan.graph_replays times per real row
    count, compare each replay's real rows with eager."""
    args = problem.args()
    for size, row_counts in padded_row_counts(plan.graph_sizes):
        try:
            _capture_and_compare(provider, case, problem, plan, rec, device, args, size,
                                 row_counts)
        except Exception as exc:  # a provider that cannot be captured is a result
            rec.error(provider.name, case.id, "graph", RuntimeError(f"B={size}: {exc}"))
        finally:
            torch.cuda.synchronize(device)


def _capture_and_compare(provider, case, problem, plan, rec, device, args, size, row_counts):
    static_x = apply_layout(make_rows(problem, case, size, f"graph{size}-warmup", device),
                            case.layout)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm up off the capture stream, as torch recommends
        for _ in range(WARMUP_CALLS):
            provider(static_x, *args)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)

    graph = torch.cuda.CUDAGraph()
    with CompileWatch() as watch:
        with torch.cuda.graph(graph):
            static_y = provider(static_x, *args)
    if watch.compiled:
        raise RuntimeError(f"capture compiled {len(watch.compiled)} Triton kernel(s) "
                           f"({watch.compiled[0]}): the warm-up missed a specialization, "
                           "so the graph is not compared")
    for replay in range(plan.graph_replays):
        for m in row_counts:
            fresh = make_rows(problem, case, m, f"graph{size}-replay{replay}-m{m}", device)
            padding = make_rows(problem, case, size - m, f"graph{size}-pad{replay}-m{m}",
                                device)
            _write_rows(static_x, torch.cat((fresh, padding)))
            graph.replay()
            eager = provider(apply_layout(fresh, case.layout), *args)
            compare(rec, provider=provider.name, case=case, kind="graph",
                    test=take_rows(static_y, 0, m), ref=eager, m=m, ref_m=size,
                    reference="eager", detail=f"captured at B={size}, replay {replay}")
    del graph, static_y
