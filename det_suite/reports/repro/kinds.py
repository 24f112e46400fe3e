"""What each check's JSON says, in one shape: kind, title, status, headline lines, what ran,
what was skipped and why.

Each check writes its own JSON (invariance: invariance/report.py; lint: the lint command's
{"lint", "environment"}; GEMM bench: bench/gemm/results.py; cache-hit:
checks/cache_hit_report.py; e2e: bench/e2e/job.py; gpu-suite: checks/gpu_suite.py). A
result of any other check is read generically: a `kind` or `schema` field names it, and
`headline` / `verdict` / `ok` / `exit_code` / `skipped` are used when present, so a new
check (GSM8K) appears in the report without a change here.
"""

from __future__ import annotations

from typing import Callable

# Known kinds in report order, with the title a reader sees.
TITLES = {
    "invariance": "Kernel invariance",
    "lint": "Instruction lint",
    "gemm-bench": "GEMM benchmark",
    "cache-hit": "Prefix-cache hit",
    "gsm8k": "GSM8K outputs",
    "e2e": "End-to-end timing",
    "gpu-suite": "GPU suite",
}
# Other kinds det-suite writes: a readable title, without listing them among the checks a
# report says were not given.
OTHER_TITLES = {
    "gsm8k-check": "GSM8K fixture check",
    "fixed-work-compare": "Output comparison",
    "reference_agreement": "fp32 reference agreement",
    "h200-model-runs": "Model-run steps (tools/gpu_model_runs.sh)",
}
# A comparison's own verdicts (det_suite.checks.fixed_work, checks.gsm8k) -> report status.
# Not comparable is neither a pass nor a failure, and no report built on it passes.
COMPARISON_STATUS = {"exact": "pass", "differs": "fail", "not comparable": "not-comparable"}
VERDICT_LINES = 12        # a check's verdict lines shown; the rest are in its raw data
# Results that are part of another result, or a report made of results: never reported
# as a result of their own.
PARTS = ("det-suite/e2e-boot/", "det-suite/e2e-plan/", "det-suite/repro-report/")


def _status(ok) -> str:
    return "info" if ok is None else ("pass" if ok else "fail")


def _as_lines(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [f"{k}: {v}" for k, v in value.items()]
    return [str(v) for v in value]


def _invariance(d: dict) -> dict:
    counts = d["counts"]
    lines = [f"{counts['total']} bit-exact comparisons (torch.equal), {counts['differing']} "
             "differ in total (controls included)"]
    for family, f in d.get("det_suite_families", {}).items():
        lines.append(f"det-suite kernel, {family} table: {f['comparisons']} comparisons, "
                     f"{f['differing']} differ")
    lines += [f"{v['provider']}: {v['status']} - {v['message']}" for v in d.get("verdicts", [])]
    skipped = [f"provider {p['name']}: {p['reason']}" for p in d.get("skipped_providers", [])]
    if d.get("graph_skipped"):
        skipped.append(f"CUDA Graph replay: {d['graph_skipped']}")
    return {"status": _status(d.get("ok")), "headline": lines, "skipped": skipped,
            "ran": f"{len(d.get('cases', []))} cases over {len(d.get('providers', []))} "
                   f"providers in {d.get('run_seconds', '?')} s"}


def _lint(d: dict) -> dict:
    from det_suite.lint.render import variant_count

    lint = d.get("lint", d)
    lines = [f"{variant_count(lint)} launch variants cross-compiled (Triton "
             f"{lint.get('triton_version', '?')}), {len(lint.get('violations', []))} "
             "violations"]
    lines += [f"violation: {v}" for v in lint.get("violations", [])[:10]]
    return {"status": _status(lint.get("ok")), "headline": lines,
            "skipped": [f"warning: {w}" for w in lint.get("warnings", [])],
            "ran": f"{len(lint.get('tables', []))} (table, target) pairs"}


def _gemm(d: dict) -> dict:
    lines = []
    for mode, m in d.get("modes", {}).items():
        s = m["summary"]
        if s.get("geomean_ratio") is None:
            lines.append(f"[{mode}] no timed cells")
            continue
        floor = (f"; M <= 16 worst {s['worst_floor_ratio']:.2f}x the weight-bytes floor"
                 if s.get("worst_floor_ratio") is not None else "")
        lines.append(f"[{mode}] det-suite / torch._scaled_mm geometric mean "
                     f"{s['geomean_ratio']:.3f}, worst {s['worst_ratio']:.3f} at "
                     f"{s['worst_shape']} M={s['worst_m']}{floor}")
    gate = d.get("gate") or {}
    lines += [f"GATE: {f}" for f in gate.get("failures", [])]
    ok = d.get("ok")
    if ok is not None and gate.get("failures"):
        ok = False
    return {"status": _status(ok), "headline": lines, "skipped": [],
            "ran": f"{len(d.get('shapes', []))} shapes x M {d.get('m')}, modes "
                   f"{', '.join(d.get('modes', {}))}"}


def _cache_hit(d: dict) -> dict:
    ok = d.get("exit_code") == 0 if "exit_code" in d else d.get("det_exact")
    s = d.get("settings", {})
    return {"status": _status(ok), "headline": _as_lines(d.get("verdict")),
            "skipped": _as_lines(d.get("skipped")),
            "ran": f"{s.get('model', '?')} on {s.get('backend', '?')}, modes "
                   f"{', '.join(s.get('modes', []))}, prefixes {s.get('prefixes')} x batches "
                   f"{s.get('batches')}"}


def _e2e(d: dict) -> dict:
    status = _status(d.get("ok"))
    if not d.get("complete", True) and not d.get("failure"):
        status = "incomplete"
    plan = d.get("plan", {})
    arms = ", ".join(a["name"] for a in plan.get("arms", []))
    skipped = list(d.get("notes", []))
    thermal = (d.get("summary") or {}).get("thermal") or {}
    if thermal and not thermal.get("available"):
        skipped.append("thermal gate unavailable: "
                       + ("; ".join(thermal.get("unavailable_reasons", [])) or "no boot ran"))
    floor = (d.get("summary") or {}).get("floor") or {}
    if floor and not floor.get("measured"):
        skipped.append(f"decode floor not measured: {floor.get('reason')}")
    lines = list(d.get("headline", [])) + [f"GATE: {f}" for f in d.get("gate", {})
                                           .get("failures", [])]
    if d.get("failure"):
        lines.append(f"FAILED: {d['failure']}")
    return {"status": status, "headline": lines, "skipped": skipped,
            "ran": f"{plan.get('model', '?')}: arms {arms}, boots {plan.get('order', '?')}, "
                   f"prefixes {plan.get('prefixes')} x batches {plan.get('batches')}, "
                   f"{plan.get('output_tokens')} tokens"}


def step_lines(steps: list[dict]) -> list[str]:
    """A run of steps: first which failed (the line a report's table shows), then each."""
    failed = [f"{s['step']} (exit {s['exit_code']}{', timed out' if s.get('timed_out') else ''})"
              for s in steps if s["exit_code"] != 0]
    count = f"{len(steps)} step{'' if len(steps) == 1 else 's'}"
    summary = (f"{count}, {len(failed)} failed: {', '.join(failed)}" if failed
               else f"{count}, all exit 0")
    return [summary] + [f"{s['step']}: exit {s['exit_code']}"
                        f"{' (timed out)' if s.get('timed_out') else ''} in {s['wall_s']} s"
                        + (f" (limit {s['limit_s']} s)" if "limit_s" in s else "")
                        for s in steps]


def _steps(d: dict) -> dict:
    """tools/gpu_model_runs.sh's step table of one phase."""
    steps = d.get("steps", [])
    return {"status": _status(d.get("ok")), "headline": step_lines(steps), "skipped": [],
            "ran": str(d.get("ran") or ", ".join(s["step"] for s in steps))}


def _gpu_suite(d: dict) -> dict:
    lines = step_lines(d.get("steps", []))
    p = d.get("pytest")
    if p:
        lines.append(f"pytest: {p['passed']} passed, {p['failures']} failed, {p['errors']} "
                     f"errors, {p['skipped']} not run")
    return {"status": _status(d.get("ok")), "headline": lines, "skipped": [],
            "ran": ", ".join(s["step"] for s in d.get("steps", []))}


def _gsm8k(d: dict) -> dict:
    """A GSM8K run (det_suite/gsm8k/fixture.py: key, settings, summary, rows), and whatever
    verdict a check over it adds (ok / headline / verdict / skipped, read generically)."""
    section = generic({k: v for k, v in d.items() if k != "summary"})
    s = d.get("summary") or {}
    lines = []
    if "rows" in s:
        accuracy = f" ({s['accuracy']:.1%})" if isinstance(s.get("accuracy"), float) else ""
        answers = ", ".join(f"{k} {v}" for k, v in (s.get("answers") or {}).items())
        lines.append(f"{s['rows']} rows, {s.get('correct', '?')} correct{accuracy}; answers: "
                     f"{answers or '?'}; {s.get('stopped', '?')} stopped, "
                     f"{s.get('output_tokens', '?')} output tokens")
    if lines and section["headline"] == ["(no headline in this result)"]:
        section["headline"] = lines
    elif lines:
        section["headline"] = section["headline"] + lines
    key = d.get("key") or {}
    if key:
        section["ran"] = ", ".join(f"{k} {_compact(v)}" for k, v in key.items())
    return section


def _reference_agreement(d: dict) -> dict:
    """det-suite reference-check: each arm's distance from the fp32 reference forward."""
    arms = d.get("arms") or {}
    lines = [f"{name}: max |delta| {a.get('max_abs', float('nan')):.4g}, mean "
             f"{a.get('mean_abs', float('nan')):.4g} over {a.get('logprobs', '?')} logprobs"
             for name, a in arms.items()] + _as_lines(d.get("problems"))
    section = generic(d)
    section["headline"] = lines or section["headline"]
    return section


def _compact(value) -> str:
    """A recorded value in a line a reader can scan: dicts as 'key value' pairs, empty
    fields left out."""
    if isinstance(value, dict):
        return "(" + ", ".join(f"{k} {_compact(v)}" for k, v in value.items()
                               if v not in (None, "", [], {})) + ")"
    if isinstance(value, (list, tuple)):
        return ", ".join(_compact(v) for v in value)
    return str(value)


def _comparison(d: dict) -> dict:
    """`det-suite gsm8k check` (check.json) and `det-suite compare --json`: exact, differs or
    not comparable, with the reasons and, for GSM8K, what changed in the kernel policy."""
    section = generic(d)
    section["status"] = COMPARISON_STATUS.get(d.get("status"), section["status"])
    lines = [line.strip() for line in _as_lines(d.get("verdict"))] or section["headline"]
    if len(lines) > VERDICT_LINES:
        lines = lines[:VERDICT_LINES] + [f"... {len(lines) - VERDICT_LINES} more lines in "
                                         "the raw data"]
    section["headline"] = lines
    if d.get("status") == "not comparable":
        section["skipped"] = section["skipped"] + [f"not comparable: {r}"
                                                   for r in _as_lines(d.get("reasons"))]
    runs = [f"{side} {d[side]}" for side in ("fixture", "a", "b") if d.get(side)]
    section["ran"] = "; ".join(runs)
    return section


def generic(d: dict) -> dict:
    """Any other check: its own headline / verdict / summary lines and ok / exit_code."""
    ok = d.get("ok", d.get("passed"))
    if ok is None and isinstance(d.get("exit_code"), int):
        ok = d["exit_code"] == 0
    lines = (_as_lines(d.get("headline")) or _as_lines(d.get("verdict"))
             or _as_lines(d.get("summary")) or ["(no headline in this result)"])
    return {"status": _status(ok), "headline": lines, "skipped": _as_lines(d.get("skipped")),
            "ran": str(d.get("ran") or d.get("settings") or "")[:300]}


SUMMARIZERS: dict[str, Callable[[dict], dict]] = {
    "invariance": _invariance, "lint": _lint, "gemm-bench": _gemm, "cache-hit": _cache_hit,
    "e2e": _e2e, "gpu-suite": _gpu_suite, "gsm8k": _gsm8k,
    "reference_agreement": _reference_agreement, "gsm8k-check": _comparison,
    "fixed-work-compare": _comparison, "h200-model-runs": _steps,
}


def title_of(kind: str) -> str:
    return TITLES.get(kind) or OTHER_TITLES.get(kind) or kind


def kind_of(d) -> str | None:
    """The kind of a result JSON; None for JSON that is no check's result (or a part of
    one, such as an e2e boot record)."""
    if not isinstance(d, dict):
        return None
    schema = str(d.get("schema") or (d.get("lint") or {}).get("schema") or "")
    if schema.startswith(PARTS):
        return None
    declared = d.get("kind")
    if isinstance(declared, str) and declared:
        return declared
    for prefix, kind in (("det-suite/invariance/", "invariance"),
                         ("det-suite/policy-lint/", "lint"),
                         ("det_suite.bench.gemm/", "gemm-bench"), ("det-suite/e2e/", "e2e")):
        if schema.startswith(prefix):
            return kind
    if "gsm8k" in schema.lower():
        return "gsm8k"
    if {"comparisons", "det_exact", "control_reproduced"} <= d.keys():
        return "cache-hit"
    if {"steps", "pytest"} <= d.keys():
        return "gpu-suite"
    return schema or None


def summarize(kind: str, d: dict) -> dict:
    """The section of one result; a summarizer that cannot read it says so, never crashes
    the report."""
    try:
        section = SUMMARIZERS.get(kind, generic)(d)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        section = {"status": "unreadable", "headline": [f"could not read this {kind} result: "
                                                        f"{type(exc).__name__}: {exc}"],
                   "skipped": [], "ran": ""}
    return {"kind": kind, "title": title_of(kind), **section}
