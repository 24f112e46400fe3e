"""From boot records to what the report states: per arm and cell the pooled median, each
boot's median and range, per metric; the ratio of each arm to arm A with its confidence
interval; the decode floor; the thermal gate's record; the opt-in gates.

Warm-up samples are kept in the data and left out of every statistic.
"""

from __future__ import annotations

from det_suite.bench.e2e.stats import median, pooled, ratio_interval, value_range

METRICS = ("e2e_ms", "prefill_ms", "decode_ms_per_step")
METRIC_LABELS = {"e2e_ms": "end to end", "prefill_ms": "prefill",
                 "decode_ms_per_step": "decode step"}
GPU_CLAIM = ("timings from the Triton interpreter on a CPU are not speed claims; "
             "they show that the protocol runs")


def _measured(samples, prefix: int, batch: int) -> list[dict]:
    return [s for s in samples if s["prefix"] == prefix and s["batch"] == batch
            and not s["warmup"]]


def arm_cell(boots: list[dict], prefix: int, batch: int) -> dict:
    """One arm's statistics in one cell, from that arm's boots."""
    out = {"boots": [b["index"] for b in boots]}
    for metric in METRICS:
        per_boot = [[s[metric] for s in _measured(b["samples"], prefix, batch)] for b in boots]
        per_boot = [v for v in per_boot if v]
        values = pooled(per_boot)
        out[metric] = {
            "median": median(values) if values else None,
            "samples": len(values),
            "boot_medians": [median(v) for v in per_boot],
            "boot_ranges": [list(value_range(v)) for v in per_boot],
            "range": list(value_range(values)) if values else None,
        }
    digests = {s["output_sha256"] for b in boots for s in b["samples"]
               if s["prefix"] == prefix and s["batch"] == batch}
    out["outputs_identical"] = len(digests) == 1
    return out


def _ratio(a_boots, b_boots, prefix, batch, metric, seed) -> dict:
    a = [[s[metric] for s in _measured(b["samples"], prefix, batch)] for b in a_boots]
    b = [[s[metric] for s in _measured(x["samples"], prefix, batch)] for x in b_boots]
    a, b = [v for v in a if v], [v for v in b if v]
    if not a or not b:
        return {"ratio": None, "ci95": None}
    low, high = ratio_interval(a, b, seed=seed)
    return {"ratio": median(pooled(b)) / median(pooled(a)), "ci95": [low, high]}


def thermal_summary(boots: list[dict]) -> dict:
    gated = [s["gate"] for b in boots for s in b["samples"]]
    statuses = {}
    for g in gated:
        statuses[g["status"]] = statuses.get(g["status"], 0) + 1
    readings = [r for b in boots for s in b["samples"]
                for r in (s["gate"]["reading"], s["after"]) if r]
    reasons = sorted({b["thermal_gate"]["reason"] for b in boots
                      if not b["thermal_gate"]["available"]})
    return {
        "available": all(b["thermal_gate"]["available"] for b in boots) if boots else False,
        "max_temp_c": boots[0]["thermal_gate"]["max_temp_c"] if boots else None,
        "statuses": statuses, "unavailable_reasons": reasons,
        "peak_temp_c": max((r["temp_c"] for r in readings), default=None),
        "peak_power_w": max((r["power_w"] for r in readings if r["power_w"] is not None),
                            default=None),
        "sm_clock_mhz_range": ([min(c), max(c)] if (c := [r["sm_clock_mhz"] for r in readings
                                                          if r["sm_clock_mhz"] is not None])
                               else None),
        "waited_s_total": sum(g["waited_s"] for g in gated),
    }


def floor_summary(boots: list[dict], arms: list[dict], cells: dict) -> dict:
    """Weight bytes / measured copy bandwidth, and each batch-1 decode step against it."""
    measured = [b["floor"] for b in boots if b["floor"].get("measured")]
    weight = boots[0]["floor"]["weight_bytes"] if boots else None
    if not measured:
        reasons = sorted({b["floor"].get("reason", "") for b in boots})
        return {"weight_bytes": weight, "measured": False, "reason": "; ".join(reasons),
                "rows": []}
    bandwidth = median([f["copy_bandwidth_bytes_per_s"] for f in measured])
    floor_ms = weight / bandwidth * 1e3
    rows = []
    for key, by_arm in cells.items():
        prefix, batch = key
        if batch != 1:
            continue
        for arm in arms:
            step = by_arm["arms"][arm["name"]]["decode_ms_per_step"]["median"]
            if step is not None:
                rows.append({"arm": arm["name"], "cuda_graph": arm["cuda_graph"],
                             "prefix": prefix, "decode_ms_per_step": step,
                             "floor_ratio": step / floor_ms})
    return {"weight_bytes": weight, "measured": True, "copy_bandwidth_bytes_per_s": bandwidth,
            "bandwidth_per_boot": [f["copy_bandwidth_bytes_per_s"] for f in measured],
            "floor_ms": floor_ms, "rows": rows}


def summarize(plan: dict, boots: list[dict], *, seed: int = 0) -> dict:
    """Cells (keyed (prefix, batch)) with per-arm statistics and ratios to arm A."""
    arms = plan["arms"]
    by_arm = {a["name"]: [b for b in boots if b["arm"]["name"] == a["name"]] for a in arms}
    reference = arms[0]["name"]
    cells = {}
    for prefix in plan["prefixes"]:
        for batch in plan["batches"]:
            entry = {"prefix": prefix, "batch": batch,
                     "arms": {name: arm_cell(bs, prefix, batch) for name, bs in by_arm.items()
                              if bs},
                     "ratios": {}}
            for arm in arms[1:]:
                if by_arm[arm["name"]] and by_arm[reference]:
                    entry["ratios"][arm["name"]] = {
                        m: _ratio(by_arm[reference], by_arm[arm["name"]], prefix, batch, m,
                                  seed) for m in METRICS}
            cells[(prefix, batch)] = entry
    complete = all(by_arm[a["name"]] for a in arms)
    return {"reference": reference, "cells": cells, "thermal": thermal_summary(boots),
            "floor": floor_summary(boots, arms, cells) if complete else
            {"measured": False, "reason": "not every arm booted", "rows": []}}


def gate_failures(summary: dict, *, max_ratio: float | None,
                  max_decode_floor_ratio: float | None) -> list[str]:
    failures = []
    if max_ratio is not None:
        for cell in summary["cells"].values():
            for arm, ratios in cell["ratios"].items():
                r = ratios["e2e_ms"]["ratio"]
                if r is None or r > max_ratio:
                    shown = "no ratio" if r is None else f"{r:.3f}"
                    failures.append(f"{arm} / {summary['reference']} end to end at prefix "
                                    f"{cell['prefix']} batch {cell['batch']}: {shown} > "
                                    f"{max_ratio:g}")
    if max_decode_floor_ratio is not None:
        floor = summary["floor"]
        rows = [r for r in floor["rows"] if r["cuda_graph"]]
        if not floor["measured"] or not rows:
            failures.append("decode floor: no batch-1 CUDA Graph decode measured against a "
                            f"measured floor ({floor.get('reason') or 'no graph arm'})")
        for r in rows:
            if r["floor_ratio"] > max_decode_floor_ratio:
                failures.append(f"{r['arm']} batch-1 decode step at prefix {r['prefix']}: "
                                f"{r['floor_ratio']:.2f}x the weight-read floor > "
                                f"{max_decode_floor_ratio:g}")
    return failures
