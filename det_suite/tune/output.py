"""What a tuning run writes: the base table with the tuned entries in it (the table format
is det_suite.policy.table_format), where it was tuned (`tuned_on`, from
det_suite.reports.environment) and the tuning report.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Sequence

from det_suite.policy import TilePolicy, policy_json, write_policy_file
from det_suite.tune.tuner import ShapeOutcome, TuneSettings

SCHEMA = "det_suite.tune/1"
# The environment fields a table's `tuned_on` block carries, under its own names.
TUNED_ON_FIELDS = (("date", "timestamp_utc"), ("host", "host"), ("torch", "torch"),
                   ("torch_cuda", "torch_cuda"), ("triton", "triton"),
                   ("det_suite", "det_suite"), ("git_revision", "git_revision"),
                   ("triton_interpret", "triton_interpret"))


def tuned_on(device=None, env: dict | None = None) -> dict:
    """Where and with what a table was tuned: `env` (default: reports.environment's
    environment()) in the table's field names, with the GPU of `device` (default: the one
    environment() describes)."""
    from det_suite.reports.environment import environment

    env = environment() if env is None else env
    info = {name: env.get(key) for name, key in TUNED_ON_FIELDS}
    gpu = env.get("gpu") or {}
    info.update(gpu=gpu.get("name"), capability=gpu.get("capability"),
                multiprocessors=gpu.get("multiprocessors"))
    if gpu and device is not None:
        info.update(_device_gpu(device))
    return info


def _device_gpu(device) -> dict:
    """The GPU fields of a CUDA device other than the first (environment() describes 0)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or (device.index or 0) == 0:
        return {}
    props = torch.cuda.get_device_properties(device)
    return {"gpu": props.name, "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count}


def tuned_policy_json(base: TilePolicy, outcomes: Sequence[ShapeOutcome],
                      settings: TuneSettings, tuned_on_info: dict,
                      elapsed_s: float | None = None) -> dict:
    """The table: base default, base entries, tuned entries replacing base ones."""
    entries = dict(base.entries)
    for outcome in outcomes:
        if outcome.entry is not None:
            entries[(outcome.shape.n, outcome.shape.k)] = outcome.entry
    tuned = [o.shape.dims for o in outcomes if o.entry is not None]
    kept = [o.shape.dims for o in outcomes if o.entry is None]
    gpu = tuned_on_info.get("gpu") or "no GPU (Triton interpreter)"
    note = (f"Tuned by `det-suite tune` on {gpu} from {base.source or 'the shipped table'}; "
            f"entries tuned and proven invariant here: {', '.join(tuned) or 'none'}")
    if kept:
        note += f"; every candidate rejected (base entry kept): {', '.join(kept)}"
    table = policy_json(
        replace(base, entries=entries), note=note + ".",
        tuned_on={**tuned_on_info, "elapsed_s": None if elapsed_s is None
                  else round(elapsed_s, 1), "budget_s": settings.budget_s})
    table["tuning"] = {
        "schema": SCHEMA,
        "timing": "median us per call, L2 flushed before every call (do_bench)",
        "settings": asdict(settings),
        "shapes": [o.to_json() for o in outcomes],
        "rejected": [r for o in outcomes for r in o.rejected],
    }
    return table


def write_tuned_policy(path, payload: dict):
    """Check the payload loads as a policy, then write it atomically."""
    return write_policy_file(path, payload)
