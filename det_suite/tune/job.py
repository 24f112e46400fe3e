"""`det-suite tune` as a library call: a `TuneJob` in, a `TuneRun` out, the table written.

The command (det_suite/commands/tune.py) parses its arguments into a TuneJob, calls
`tune_table` and prints the outcome; tests and other commands call it directly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from det_suite.bench.gemm import GemmShape
from det_suite.tune.precompile import stderr_log
from det_suite.tune.tuner import ShapeOutcome, Tuner, TuneSettings


class TuneUsageError(ValueError):
    """A job that cannot run here: a foreign family, an unreadable base table, bad
    settings."""


@dataclass(frozen=True)
class TuneJob:
    shapes: Sequence[GemmShape]
    out: str | Path
    settings: TuneSettings        # family "auto": this GPU's (anything else must equal it)
    base_policy: str | Path | None = None  # default: the shipped table of the family


@dataclass
class TuneRun:
    family: str
    settings: TuneSettings        # as run (family resolved)
    outcomes: list[ShapeOutcome]
    payload: dict                 # the table written
    path: Path
    elapsed_s: float


def resolve_family(requested: str, detected: str) -> str:
    """'auto' -> the detected family; anything else must equal it."""
    if requested == "auto":
        return detected
    if requested != detected:
        raise ValueError(f"--family {requested} but this GPU is {detected}: a table is tuned "
                         "and proven on the family it is for (use --family auto)")
    return requested


def tune_table(job: TuneJob, *, log: Callable[[str], None] = stderr_log) -> TuneRun:
    """Tune `job.shapes` on this process's current CUDA device and write the table to
    `job.out`. Raises bench.timing.GpuRequired without a usable GPU and TuneUsageError for a
    job that cannot run here, both before anything is timed; errors while tuning
    propagate."""
    from det_suite.bench.timing import require_gpu

    require_gpu("tune")

    import torch

    from det_suite.platform.family import device_family
    from det_suite.policy import load_policy_file, shipped_policy
    from det_suite.tune.output import tuned_on, tuned_policy_json, write_tuned_policy

    device = torch.device("cuda", torch.cuda.current_device())
    try:
        family = resolve_family(job.settings.family, device_family(device))
        base = load_policy_file(job.base_policy) if job.base_policy else shipped_policy(family)
        if base.family != family:
            raise ValueError(f"--base-policy is for {base.family}, not {family}")
        settings = replace(job.settings, family=family).validate()
    except (OSError, ValueError, KeyError) as exc:
        raise TuneUsageError(str(exc)) from exc
    started = time.monotonic()
    outcomes = Tuner(settings, device=device, log=log).tune(list(job.shapes))
    elapsed = time.monotonic() - started
    payload = tuned_policy_json(base, outcomes, settings, tuned_on(device), elapsed)
    path = Path(write_tuned_policy(job.out, payload))
    return TuneRun(family=family, settings=settings, outcomes=outcomes, payload=payload,
                   path=path, elapsed_s=elapsed)
