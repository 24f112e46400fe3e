"""One reproducibility report from the results of any checks: what ran and how it ended,
what was skipped and why, the environment each result was produced in, the git revisions
and the sha256 of the kernel sources and tile tables each result ran, links to the raw data.

`build_report(settings)` returns the payload (repro.json); `render` turns it into Markdown
and HTML; `write_report` writes them atomically.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from det_suite.reports.repro.inputs import ResultFile, load_inputs
from det_suite.reports.repro.kinds import TITLES, summarize, title_of
from det_suite.reports.repro.stack import ENV_FIELDS, environment_row, not_installed

SCHEMA = "det-suite/repro-report/1"
# Source files whose bytes decide what a kernel computes: hashed in every report.
KERNEL_PREFIXES = ("det_suite/kernels/", "det_suite/policy/tables/")


@dataclass(frozen=True)
class ReportSettings:
    inputs: tuple[str, ...]
    out: str = "results/report"
    title: str = "det-suite reproducibility report"
    step_summary: str | None = None     # add the summary to this file; "": $GITHUB_STEP_SUMMARY
    screenshot: bool = False            # repro.png of the HTML page, in a headless browser

    def __post_init__(self) -> None:
        if isinstance(self.inputs, str) or not self.inputs:
            raise ValueError(f"inputs: expected one or more result files or folders, got "
                             f"{self.inputs!r}")


def _machines(results: list[ResultFile]) -> list[dict]:
    """Results grouped by the machine and stack that produced them; fields a result of the
    group recorded fill the group's column."""
    groups: dict[tuple, dict] = {}
    for i, r in enumerate(results):
        env = r.data.get("environment") or {}
        key = (env.get("host"), env.get("machine"), env.get("torch"), env.get("triton"))
        group = groups.setdefault(key, {"host": env.get("host"), "results": [],
                                        "fields": dict.fromkeys(ENV_FIELDS),
                                        "not_installed": set()})
        group["results"].append(i)
        for name, value in environment_row(r.data).items():
            if value is not None and group["fields"][name] is None:
                group["fields"][name] = value
        group["not_installed"] |= not_installed(r.data)
    for group in groups.values():
        group["not_installed"] = sorted(n for n in group["not_installed"]
                                        if group["fields"][n] is None)
    return list(groups.values())


def kernel_hashes(results: list[ResultFile], current: dict[str, str]) -> dict:
    """Per kernel source / tile table: the hashes the results recorded, whether they agree,
    and whether this tree still has those bytes."""
    files: dict[str, dict[str, list[int]]] = {}
    recorded_by = []
    for i, r in enumerate(results):
        hashes = (r.data.get("environment") or {}).get("source_sha256") or {}
        kernel = {p: h for p, h in hashes.items() if p.startswith(KERNEL_PREFIXES)}
        if kernel:
            recorded_by.append(i)
        for path, digest in kernel.items():
            files.setdefault(path, {}).setdefault(digest, []).append(i)
    rows = []
    for path in sorted(set(files) | {p for p in current if p.startswith(KERNEL_PREFIXES)}):
        seen = files.get(path, {})
        rows.append({"path": path, "hashes": {h: idx for h, idx in seen.items()},
                     "consistent": len(seen) <= 1,
                     "current": current.get(path),
                     "unchanged": (None if not seen else
                                   len(seen) == 1 and current.get(path) in seen)})
    return {"recorded_by": recorded_by, "rows": rows,
            "consistent": all(r["consistent"] for r in rows),
            "differ": [r["path"] for r in rows if not r["consistent"]],
            "changed_since": [r["path"] for r in rows if r["unchanged"] is False]}


def run_provenance(results: list[ResultFile], roots) -> tuple[list[str], list[str]]:
    """(mixed, notes). mixed: results inside a run folder (reports.run_folder) that do not
    carry that folder's run_id, i.e. a folder holding two runs: the report refuses those.
    notes: inputs from different runs or git revisions, said so (not refused: one report
    often gathers several checks' runs)."""
    from det_suite.reports.run_folder import manifest_for

    mixed = []
    roots = [Path(r).resolve() for r in roots]
    for r in results:
        path = r.path.resolve()
        root = next((root for root in roots if root == path or root in path.parents), path)
        found = manifest_for(path, root)
        if found is not None and found[1].get("run_id") != r.data.get("run_id"):
            mixed.append(f"{r.path} is not from run {found[1].get('run_id')} of the run "
                         f"folder {found[0]} (it records run {r.data.get('run_id')}): the "
                         "folder mixes runs")
    notes = []
    runs = sorted({str(r.data["run_id"]) for r in results if r.data.get("run_id")})
    if len(runs) > 1:
        notes.append(f"the results come from {len(runs)} different runs ({', '.join(runs)})")
    revisions = sorted({str(rev) for r in results
                        if (rev := (r.data.get("environment") or {}).get("git_revision"))})
    if len(revisions) > 1:
        notes.append(f"the results come from {len(revisions)} different git revisions "
                     f"({', '.join(revisions)})")
    return mixed, notes


def _result_entry(r: ResultFile, out: Path) -> dict:
    env = r.data.get("environment") or {}
    section = summarize(r.kind, r.data)
    return {**section, "path": str(r.path), "link": os.path.relpath(r.path, out),
            "machine": env.get("machine"), "revision": env.get("git_revision"),
            "timestamp": env.get("timestamp_utc"), "run_id": r.data.get("run_id"),
            "source_tree_sha256": env.get("source_tree_sha256"),
            "plots": [{"path": str(p), "link": os.path.relpath(p, out)} for p in r.plots]}


def build_report(settings: ReportSettings) -> dict:
    from det_suite.reports.environment import environment
    from det_suite.reports.provenance import source_hashes

    out = Path(settings.out).resolve()
    results, notes = load_inputs(settings.inputs)
    results.sort(key=lambda r: (list(TITLES).index(r.kind) if r.kind in TITLES
                                else len(TITLES), str(r.path)))
    entries = [_result_entry(r, out) for r in results]
    present = {e["kind"] for e in entries}
    checks = [{"kind": k, "title": t, "present": k in present,
               "statuses": [e["status"] for e in entries if e["kind"] == k]}
              for k, t in TITLES.items()]
    checks += [{"kind": k, "title": title_of(k), "present": True,
                "statuses": [e["status"] for e in entries if e["kind"] == k]}
               for k in sorted(present - set(TITLES))]
    revisions: dict[str, list[int]] = {}
    for i, e in enumerate(entries):
        revisions.setdefault(e["revision"] or "not recorded", []).append(i)
    statuses = [e["status"] for e in entries]
    mixed, provenance_notes = run_provenance(results, settings.inputs)
    report_env = environment()
    return {
        "schema": SCHEMA, "title": settings.title,
        "ok": all(s in ("pass", "info") for s in statuses) and not mixed,
        "comparable": not mixed, "not_comparable": mixed,
        "counts": {s: statuses.count(s) for s in sorted(set(statuses))},
        "results": entries, "checks": checks,
        "machines": _machines(results),
        "revisions": revisions,
        "kernel_hashes": kernel_hashes(results, source_hashes()),
        "generated": {"environment": report_env, "packages": report_env["packages"],
                      "gpu": report_env["gpu"]},
        "notes": notes + provenance_notes,
    }
