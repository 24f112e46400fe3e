"""The cache-hit matrix's report: raw values in JSON, a Markdown table, a verdict that says
only what the run showed."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from det_suite.checks.cache_hit import (HIT_PHASES, M_DEPENDENT, NOT_SHOWN, CacheHitResult,
                                        Comparison)
from det_suite.reports.files import write_json_atomic, write_text_atomic
from det_suite.reports.tables import markdown_table

HEADER = ("mode", "engine", "prefix", "batch", "rep", "compared", "cached tokens",
          "values", "max |delta|", "ids equal", "exact")


def _row(c: Comparison) -> tuple:
    cached = c.cached_tokens if c.phase in ("hit", "warm") else "-"
    if c.phase in ("hit", "warm") and not c.hit_proven:
        cached = f"{c.cached_tokens} (no hit: FAIL)"
    return (c.mode, c.engine, c.prefix, c.batch, c.rep, c.phase, cached, c.values,
            f"{c.max_abs_delta:.3g}", "yes" if c.tokens_equal else "no",
            "yes" if c.exact else "no")


def verdict_lines(result: CacheHitResult) -> list[str]:
    lines = []
    det, stock = result.rows("det"), result.rows("stock")
    values = sum(c.values for c in result.comparisons)
    lines.append(f"{len(result.comparisons)} comparisons, {values} logprob values compared "
                 f"bit for bit (plus generated ids), in {result.seconds:.1f} s.")
    if det:
        failed = [c for c in det if not c.passed]
        no_hit = [c for c in det if not c.hit_proven]
        if not failed:
            lines.append(f"det mode: exact in all {len(det)} comparisons; every hit had "
                         f"cached tokens > 0.")
        else:
            lines.append(f"det mode: NOT exact: {len(failed)} of {len(det)} comparisons failed "
                         f"({len(no_hit)} without a proven cache hit); max |delta| "
                         f"{max(c.max_abs_delta for c in det):.3g}.")
    if stock:
        differing = [c for c in stock if not c.exact]
        if differing:
            lines.append(f"control (stock mode): differs in {len(differing)} of {len(stock)} "
                         f"comparisons, max |delta| "
                         f"{max(c.max_abs_delta for c in stock):.3g}: the cache-hit "
                         "nondeterminism reproduces without det mode.")
        else:
            lines.append(f"control (stock mode): exact in all {len(stock)} comparisons: the "
                         "control did NOT reproduce here, so this run shows no difference "
                         "that det mode fixes.")
    lines += _positive_control_lines(result)
    for arm, counts in result.routing.items():
        lines.append(f"routing {arm}: {counts['det_suite']} linear layers to det-suite, "
                     f"{counts['upstream']} upstream")
    for arm, sizes in result.parallel.items():
        lines.append(f"parallelism {arm}: tensor parallel {sizes['tp_size'] or 'not reported'}, "
                     f"data parallel {sizes['dp_size'] or 'not reported'}")
    for reason in result.skipped:
        lines.append(f"not run: {reason}")
    return lines


def _positive_control_lines(result: CacheHitResult) -> list[str]:
    if result.control_flagged is None:
        return [f"positive control ({M_DEPENDENT}) not run: nothing here shows that this check "
                "would detect a schedule change"]
    rows = result.rows(M_DEPENDENT)
    hits = [c for c in rows if c.phase in HIT_PHASES]
    differing = result.control_differences()
    if differing:
        return [f"positive control ({M_DEPENDENT}): flagged, as it must be: "
                f"{len(differing)} of {len(hits)} hit comparisons differ from cold prefill "
                f"(every one with cached tokens > 0), max |delta| "
                f"{max(c.max_abs_delta for c in differing):.3g}."]
    return [f"positive control ({M_DEPENDENT}): NOT flagged: 0 of {len(hits)} hit "
            f"comparisons with a proven hit differ from cold prefill, so {NOT_SHOWN} "
            "(FAIL)."]


def render_markdown(result: CacheHitResult) -> str:
    s = result.settings
    title = f"# Cache-hit matrix: {s['model']} ({s['backend']})\n\n"
    verdict = "\n".join(f"- {line}" for line in verdict_lines(result)) + "\n\n"
    table = markdown_table(HEADER, (_row(c) for c in result.comparisons))
    return title + verdict + table + "\n"


def write_report(result: CacheHitResult, out_dir, environment: dict | None = None) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"settings": result.settings, "seconds": result.seconds,
               "det_exact": result.det_exact if result.rows("det") else None,
               "control_reproduced": result.control_reproduced,
               "positive_control_flagged": result.control_flagged,
               "positive_control_differing": len(result.control_differences()),
               "exit_code": result.exit_code, "skipped": result.skipped,
               "routing": result.routing, "parallel": result.parallel,
               "verdict": verdict_lines(result),
               "comparisons": [asdict(c) for c in result.comparisons]}
    if environment is not None:
        payload["environment"] = environment
    write_json_atomic(out / "cache_hit.json", payload)
    write_text_atomic(out / "cache_hit.md", render_markdown(result))
    return out
