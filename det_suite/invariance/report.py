"""The invariance run as a table (terminal), JSON, Markdown and a heatmap PNG.

The table has one row per provider x shape x M class: how many comparisons, whether all
were bit-exact, how many output rows differed in total, the largest absolute difference,
and the smallest M at which a difference appeared. Every output states the machine the
comparisons ran on: a result holds for that GPU, stack and tile table only.
"""

from __future__ import annotations

import io
import math
from dataclasses import asdict, is_dataclass
from pathlib import Path

from det_suite.invariance.cases import m_class, m_classes
from det_suite.invariance.compare import KINDS
from det_suite.reports.tables import markdown_table
from det_suite.reports.files import write_bytes_atomic, write_json_atomic, write_text_atomic

SCHEMA = "det-suite/invariance/1"
JSON_NAME = "invariance.json"
MARKDOWN_NAME = "invariance.md"
HEATMAP_NAME = "invariance_heatmap.png"
MAX_LISTED_MISMATCHES = 2000
KIND_LETTERS = {"suffix": "S", "composition": "C", "graph": "G", "pipeline_ab": "AB"}


# ---------------------------------------------------------------- aggregation

def cells(comparisons, provider_order=()) -> list[dict]:
    """Comparisons aggregated per (provider, shape, M class), in provider order, then shape
    order of first appearance, then M class order."""
    table: dict[tuple[str, str, str], dict] = {}
    for c in comparisons:
        key = (c.provider, c.shape, m_class(c.m))
        cell = table.get(key)
        if cell is None:
            cell = table[key] = {"provider": c.provider, "shape": c.shape, "m_class": key[2],
                                 "comparisons": 0, "by_kind": {k: 0 for k in KINDS},
                                 "differing": 0, "exact": True, "mismatching_rows": 0,
                                 "max_abs_diff": 0.0, "first_differing_m": None}
        cell["comparisons"] += 1
        cell["by_kind"][c.kind] += 1
        if not c.equal:
            cell["differing"] += 1
            cell["exact"] = False
            cell["mismatching_rows"] += c.mismatching_rows
            cell["max_abs_diff"] = max(cell["max_abs_diff"], c.max_abs_diff)
            first = cell["first_differing_m"]
            cell["first_differing_m"] = c.m if first is None else min(first, c.m)
    providers = list(dict.fromkeys(list(provider_order) + [k[0] for k in table]))
    shapes = list(dict.fromkeys(k[1] for k in table))
    classes = m_classes()
    return sorted(table.values(), key=lambda c: (providers.index(c["provider"]),
                                                  shapes.index(c["shape"]),
                                                  classes.index(c["m_class"])))


def family_summary(comparisons, providers) -> dict:
    """det-suite's kernel per tile family, all its arms together (what "the kernel passed
    N comparisons on this GPU" means)."""
    out = {}
    for p in providers:
        if not p.family:
            continue
        entry = out.setdefault(p.family, {"providers": [], "claims_invariance": False,
                                          "comparisons": 0, "differing": 0,
                                          "by_kind": {k: 0 for k in KINDS}})
        entry["providers"].append(p.name)
        entry["claims_invariance"] |= p.claims_invariance
        for c in comparisons:
            if c.provider == p.name:
                entry["comparisons"] += 1
                entry["differing"] += 0 if c.equal else 1
                entry["by_kind"][c.kind] += 1
    return out


def counts(comparisons, providers) -> dict:
    by_provider_kind = {p: {k: 0 for k in KINDS} for p in providers}
    for c in comparisons:
        by_provider_kind.setdefault(c.provider, {k: 0 for k in KINDS})[c.kind] += 1
    return {
        "total": len(comparisons),
        "differing": sum(1 for c in comparisons if not c.equal),
        "by_kind": {k: sum(v[k] for v in by_provider_kind.values()) for k in KINDS},
        "by_provider": {p: sum(v.values()) for p, v in by_provider_kind.items()},
        "by_provider_kind": by_provider_kind,
    }


# ---------------------------------------------------------------- instruction table

def instruction_table(families) -> dict:
    """`det-suite lint-policy`'s instruction table for `families`, when that module exists."""
    families = tuple(dict.fromkeys(f for f in families if f))
    try:
        from det_suite import lint as policy_lint
    except ImportError as exc:
        return {"available": False, "reason": f"det_suite.lint is not importable ({exc})"}
    try:
        table = policy_lint.instruction_table(families=families)
    except Exception as exc:  # the report must not die on a sibling tool's failure
        return {"available": False, "reason": f"det_suite.lint.instruction_table failed: "
                                              f"{type(exc).__name__}: {exc}"}
    markdown = None
    if hasattr(table, "to_markdown"):
        markdown = table.to_markdown()
    elif isinstance(table, dict) and hasattr(policy_lint, "render_markdown"):
        try:
            markdown = policy_lint.render_markdown(table)
        except Exception as exc:
            markdown = f"(policy_lint.render_markdown failed: {type(exc).__name__}: {exc})"
    if isinstance(table, dict):
        data = table
    elif hasattr(table, "to_dict"):
        data = table.to_dict()
    elif is_dataclass(table):
        data = asdict(table)
    else:
        data = str(table)
    return {"available": True, "families": list(families), "table": data,
            "markdown": markdown}


# ---------------------------------------------------------------- payload

def build_payload(result, all_verdicts, environment: dict, config: dict, *,
                  skipped=(), instructions: dict | None = None, exit_code: int = 0) -> dict:
    rec = result.recorder
    names = [p.name for p in result.providers]
    mismatches = rec.mismatches()
    return {
        "schema": SCHEMA,
        "machine": environment.get("machine"),
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "environment": environment,
        "config": config,
        "plan": result.plan.as_dict(),
        "cases": [c.as_dict() for c in result.cases],
        "graph_cases": [c.as_dict() for c in result.graph_cases],
        "graph_skipped": result.graph_skipped,
        "providers": [p.as_dict() for p in result.providers],
        "skipped_providers": [{"name": p.name, "reason": p.unavailable} for p in skipped],
        "counts": counts(rec.comparisons, names),
        "det_suite_families": family_summary(rec.comparisons, result.providers),
        "verdicts": [v.as_dict() for v in all_verdicts],
        "cells": cells(rec.comparisons, names),
        "mismatches": [c.as_dict() for c in mismatches[:MAX_LISTED_MISMATCHES]],
        "mismatches_total": len(mismatches),
        "errors": [e.as_dict() for e in rec.errors],
        "instruction_table": instructions or {"available": False, "reason": "not requested"},
        "notes": list(result.notes),
        "run_seconds": round(result.seconds, 2),
    }


# ---------------------------------------------------------------- text table

def _fmt_diff(value: float) -> str:
    if value == 0:
        return "0"
    if math.isinf(value):
        return "inf"
    return f"{value:.4g}"


def _kinds_text(by_kind: dict) -> str:
    return " ".join(f"{KIND_LETTERS[k]}{n}" for k, n in by_kind.items() if n)


def _render_rows(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return out


CELL_HEADER = ["provider", "shape", "M class", "n", "kinds", "result", "mismatching rows",
               "max abs diff", "first differing M"]


def _cell_row(cell: dict) -> list[str]:
    return [cell["provider"], cell["shape"], cell["m_class"], str(cell["comparisons"]),
            _kinds_text(cell["by_kind"]), "exact" if cell["exact"] else "DIFFERS",
            str(cell["mismatching_rows"]), _fmt_diff(cell["max_abs_diff"]),
            "-" if cell["first_differing_m"] is None else str(cell["first_differing_m"])]


def _table_lines(header, rows) -> list[str]:
    return markdown_table(header, rows).split("\n")


VERDICT_HEADER = ["provider", "claims", "comparisons", "S", "C", "G", "AB", "differ",
                  "errors", "status"]


def _verdict_row(v: dict) -> list[str]:
    role = "control" if v["expect_variant"] else ("yes" if v["claims_invariance"] else "no")
    k = v["by_kind"]
    return [v["provider"], role, str(v["comparisons"]), str(k["suffix"]),
            str(k["composition"]), str(k["graph"]), str(k["pipeline_ab"]), str(v["differing"]),
            str(v["errors"]), v["status"]]


def _family_lines(payload: dict) -> list[str]:
    lines = []
    for family, f in payload["det_suite_families"].items():
        k = f["by_kind"]
        claim = "claimed" if f["claims_invariance"] else "measured"
        lines.append(f"det-suite kernel, {family} table ({claim}; "
                     f"{', '.join(f['providers'])}): {f['comparisons']} comparisons "
                     f"(suffix {k['suffix']}, composition {k['composition']}, graph "
                     f"{k['graph']}, pipeline A/B {k['pipeline_ab']}), {f['differing']} differ")
    return lines


def format_table(payload: dict) -> str:
    """What the command prints: the cell table, per-provider verdicts, counts."""
    lines = [f"det-suite invariance on {payload['machine']} "
             f"(tile family {payload['environment'].get('tile_family')}, "
             f"{payload['environment'].get('tile_family_source')})", ""]
    lines += _render_rows(CELL_HEADER, [_cell_row(c) for c in payload["cells"]])
    lines += ["", "kinds: S cached suffix, C batch composition, G CUDA Graph replay, "
                  "AB pipeline A/B (vs the 2-stage arm)", ""]
    lines += _render_rows(VERDICT_HEADER, [_verdict_row(v) for v in payload["verdicts"]])
    total = payload["counts"]
    lines += ["", f"{total['total']} bit-exact tensor comparisons (torch.equal) in total, "
                  f"{total['differing']} differ; per kind: "
              + ", ".join(f"{k} {n}" for k, n in total["by_kind"].items())]
    lines += _family_lines(payload)
    for p in payload["skipped_providers"]:
        lines.append(f"skipped {p['name']}: {p['reason']}")
    for note in payload["notes"]:
        lines.append(f"note: {note}")
    if payload["graph_skipped"]:
        lines.append(f"CUDA Graph replay not run: {payload['graph_skipped']}")
    for v in payload["verdicts"]:
        if not v["ok"]:
            lines.append(f"FAIL {v['provider']}: {v['message']}")
    lines.append("result: " + ("PASS" if payload["ok"] else "FAIL")
                 + f" (exit code {payload['exit_code']})")
    return "\n".join(lines)


# ---------------------------------------------------------------- Markdown

def render_markdown(payload: dict, *, max_mismatches: int = 50) -> str:
    env = payload["environment"]
    total = payload["counts"]
    lines = ["# det-suite invariance report", "",
             f"**Machine:** {payload['machine']}  ",
             f"**Stack:** torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), triton "
             f"{env.get('triton')}, det-suite {env.get('det_suite')} at "
             f"{env.get('git_revision') or 'unknown revision'}  ",
             f"**Tile family:** {env.get('tile_family')} ({env.get('tile_family_source')})  ",
             f"**When:** {env.get('timestamp_utc')}; run took {payload['run_seconds']} s  ",
             f"**Result:** {'PASS' if payload['ok'] else 'FAIL'} (exit code "
             f"{payload['exit_code']})", "",
             "Every comparison is one `torch.equal` of two output tensors (bit-exact). "
             "Results hold for this machine, software stack and tile table only.", ""]
    lines += [f"Note: {note}." for note in payload["notes"]]
    lines += ["",
             "## Verdicts", ""]
    lines += _table_lines(VERDICT_HEADER, [_verdict_row(v) for v in payload["verdicts"]])
    lines += [""]
    lines += [f"- **{v['provider']}**: {v['message']}" for v in payload["verdicts"]]
    lines += ["", "Claims: `yes` must be invariant (a difference fails the run); `control` "
                  "must differ (if it does not, the comparisons are blind and the run fails); "
                  "`no` is measured and reported only.", "",
              "## Counts", "",
              f"{total['total']} bit-exact tensor comparisons, {total['differing']} differ. "
              "Per kind: " + ", ".join(f"{k} {n}" for k, n in total["by_kind"].items())
              + ".", ""]
    lines += [f"- {line}" for line in _family_lines(payload)] + [""]
    lines += _table_lines(["provider"] + list(KINDS) + ["total"],
                       [[p] + [str(kinds[k]) for k in KINDS] + [str(sum(kinds.values()))]
                        for p, kinds in total["by_provider_kind"].items()])
    plan = payload["plan"]
    lines += ["", "## What was compared", "",
              f"- cached suffix: the last m rows alone vs the same rows inside one call of "
              f"{plan['m_full']} rows, m in {plan['suffix_ms']}",
              f"- batch composition: {plan['target_rows']} target rows alone vs placed first, "
              f"in the middle or last among fresh rows in batches of {plan['placements']}",
              "- CUDA Graph replay: " + (f"captured at {plan['graph_sizes']}, "
                                         f"{plan['graph_replays']} replays of fresh rows per "
                                         "real row count, vs eager" if not
                                         payload["graph_skipped"] else
                                         f"not run ({payload['graph_skipped']})"),
              "- pipeline A/B: every output of each det-suite arm vs the same call on the "
              "2-stage arm of the same tile table",
              f"- {len(payload['cases'])} cases (shape / dtype / bias / layout / seed / "
              f"activation), {len(payload['graph_cases'])} graph cases"
              + (" (not run)" if payload["graph_skipped"] else "") + "; inputs carry "
              "cancelling outlier pairs so a change of summation order reaches the output "
              "bits (det_suite/invariance/cases.py)", "",
              "## Provider x shape x M class", ""]
    lines += _table_lines(CELL_HEADER, [_cell_row(c) for c in payload["cells"]])
    lines += ["", "kinds: S cached suffix, C batch composition, G CUDA Graph replay, AB "
                  "pipeline A/B.", ""]
    if payload["mismatches_total"]:
        shown = payload["mismatches"][:max_mismatches]
        lines += [f"## Differing comparisons ({len(shown)} of "
                  f"{payload['mismatches_total']})", ""]
        lines += _table_lines(["provider", "case", "kind", "m", "ref m", "rows", "max abs diff",
                            "vs"],
                           [[c["provider"], c["case"], c["kind"], str(c["m"]),
                             str(c["ref_m"]), str(c["mismatching_rows"]),
                             _fmt_diff(c["max_abs_diff"]), c["reference"] or "-"]
                            for c in shown])
        lines.append("")
    if payload["errors"]:
        lines += ["## Provider errors", ""]
        lines += [f"- {e['provider']} on {e['case']} ({e['kind']}): {e['message']}"
                  for e in payload["errors"][:100]]
        lines.append("")
    if payload["skipped_providers"]:
        lines += ["## Providers not run here", ""]
        lines += [f"- {p['name']}: {p['reason']}" for p in payload["skipped_providers"]]
        lines.append("")
    lines += ["## Providers", ""]
    lines += [f"- `{p['name']}`: {p['description']}" for p in payload["providers"]]
    lines += ["", "## Instruction table (det-suite lint-policy)", ""]
    table = payload["instruction_table"]
    if table.get("available"):
        lines += [table.get("markdown") or "```\n" + str(table.get("table")) + "\n```"]
    else:
        lines += [f"Not available: {table.get('reason')}."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- heatmap

def render_heatmap(payload: dict) -> tuple[bytes | None, str]:
    """PNG bytes of a provider/shape x M class map of the differing fraction, or None and
    why (matplotlib is optional: pip install 'det-suite[report]')."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return None, f"heatmap skipped: matplotlib is not importable ({exc})"
    rows = list(dict.fromkeys((c["provider"], c["shape"]) for c in payload["cells"]))
    classes = list(m_classes())
    if not rows:
        return None, "heatmap skipped: no comparisons"
    grid = [[math.nan] * len(classes) for _ in rows]
    text = [[""] * len(classes) for _ in rows]
    for c in payload["cells"]:
        i, j = rows.index((c["provider"], c["shape"])), classes.index(c["m_class"])
        grid[i][j] = c["differing"] / c["comparisons"]
        text[i][j] = f"{c['differing']}/{c['comparisons']}"
    fig, ax = plt.subplots(figsize=(2.0 + 1.1 * len(classes), 1.2 + 0.32 * len(rows)))
    cmap = plt.get_cmap("Reds").with_extremes(bad="#dddddd")  # grey: nothing compared
    import numpy as np
    image = ax.imshow(np.ma.masked_invalid(np.array(grid, dtype=float)), cmap=cmap, vmin=0,
                      vmax=1, aspect="auto")
    ax.set_xticks(range(len(classes)), labels=classes)
    ax.set_yticks(range(len(rows)), labels=[f"{p}  {s}" for p, s in rows], fontsize=7)
    ax.set_xlabel("M class (rows of the call that varies)")
    for i, row in enumerate(text):
        for j, label in enumerate(row):
            if label:
                ax.text(j, i, label, ha="center", va="center", fontsize=6,
                        color="white" if grid[i][j] > 0.5 else "black")
    ax.set_title(f"differing / bit-exact comparisons\n{payload['machine']}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.03, label="fraction differing")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    return buffer.getvalue(), ""


# ---------------------------------------------------------------- files

def write_reports(out_dir, payload: dict, *, heatmap: bool = True) -> tuple[dict, list[str]]:
    """Write JSON, Markdown and (optionally) the heatmap; returns (paths, notes)."""
    out = Path(out_dir)
    paths = {"json": str(write_json_atomic(out / JSON_NAME, payload)),
             "markdown": str(write_text_atomic(out / MARKDOWN_NAME, render_markdown(payload)))}
    notes = []
    if heatmap:
        png, note = render_heatmap(payload)
        if png is None:
            notes.append(note)
        else:
            paths["heatmap"] = str(write_bytes_atomic(out / HEATMAP_NAME, png))
    return paths, notes
