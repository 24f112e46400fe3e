"""The reproducibility report as Markdown: the full page for a pull request, and the short
form for $GITHUB_STEP_SUMMARY (results, what was skipped, where the data is)."""

from __future__ import annotations

from det_suite.reports.repro.stack import ENV_FIELDS, environment_row, not_installed
from det_suite.reports.tables import markdown_table

STATUS_TEXT = {"pass": "PASS", "fail": "FAIL", "incomplete": "INCOMPLETE", "info": "ran",
               "unreadable": "UNREADABLE", "not-comparable": "NOT COMPARABLE"}
# In "what ran", a result without a verdict: "ran: ran" says nothing.
RAN_TEXT = {**STATUS_TEXT, "info": "no verdict"}
NOT_GIVEN = "not in this report (no result given)"


def overall(payload: dict) -> str:
    counts = ", ".join(f"{n} {STATUS_TEXT.get(s, s)}" for s, n in payload["counts"].items())
    verdict = ("NOT COMPARABLE" if not payload.get("comparable", True)
               else "PASS" if payload["ok"] else "FAIL")
    return f"{verdict} ({len(payload['results'])} results: {counts})"


def _first(lines: list[str]) -> str:
    return lines[0] if lines else "-"


def results_table(payload: dict) -> str:
    rows = [[e["title"], STATUS_TEXT.get(e["status"], e["status"]), _first(e["headline"]),
             f"[{e['link'].rsplit('/', 1)[-1]}]({e['link']})"] for e in payload["results"]]
    return markdown_table(["check", "status", "headline", "raw data"], rows)


def ran_counts(statuses: list[str]) -> list[tuple[str, str]]:
    """(status, text) per distinct status in first-seen order: 'PASS', or 'PASS x3'."""
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return [(s, RAN_TEXT.get(s, s) + (f" x{n}" if n > 1 else "")) for s, n in counts.items()]


def ran_table(payload: dict) -> str:
    rows = []
    for c in payload["checks"]:
        if c["present"]:
            states = ", ".join(text for _, text in ran_counts(c["statuses"]))
            rows.append([c["title"], f"ran ({states})"])
        else:
            rows.append([c["title"], NOT_GIVEN])
    return markdown_table(["check", "in this report"], rows)


def skipped_lines(payload: dict) -> list[str]:
    lines = [f"- {e['title']}: {s}" for e in payload["results"] for s in e["skipped"]]
    return lines or ["- nothing the results report as skipped"]


def environment_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one column per machine the results came from, and the machine the
    report was built on, which never fills a result's gaps."""
    machines = payload["machines"]
    header = ["", *(f"results {', '.join(str(i + 1) for i in m['results'])}"
                    for m in machines), "report built on"]
    built_on = {"environment": payload["generated"]["environment"]}
    here = environment_row(built_on)
    for name in not_installed(built_on):
        here[name] = here[name] or "not installed"

    def cell(machine: dict, name: str) -> str:
        value = machine["fields"][name]
        if value is not None:
            return str(value)
        return "not installed" if name in machine.get("not_installed", ()) else "not recorded"

    rows = [[name, *(cell(m, name) for m in machines), str(here[name] or "-")]
            for name in ENV_FIELDS]
    return header, rows


def environment_table(payload: dict) -> str:
    return markdown_table(*environment_rows(payload))


def result_numbers(indices, every=None) -> str:
    """Result numbers; "all" where they are every result that recorded the field."""
    if every is not None and len(every) > 1 and list(indices) == list(every):
        return "all"
    return ", ".join(str(i + 1) for i in indices)


def provenance_lines(payload: dict) -> list[str]:
    lines = ["Git revisions: " + "; ".join(
        f"`{rev}` (results {', '.join(str(i + 1) for i in idx)})"
        for rev, idx in payload["revisions"].items()) + ".", ""]
    k = payload["kernel_hashes"]
    if not k["recorded_by"]:
        lines.append("No result recorded the sha256 of det-suite's sources.")
        return lines
    agree = ("the same in every result that recorded them" if k["consistent"] else
             "NOT the same across results: " + ", ".join(k["differ"]))
    changed = ("; unchanged in the tree this report was built from" if not k["changed_since"]
               else "; changed since in this tree: " + ", ".join(k["changed_since"]))
    lines += [f"Kernel sources and tile tables: {agree}{changed}.", ""]
    rows = []
    for r in k["rows"]:
        recorded = ", ".join(f"`{h[:16]}` ({result_numbers(idx, k['recorded_by'])})"
                             for h, idx in r["hashes"].items()) or "not recorded"
        rows.append([f"`{r['path']}`", recorded,
                     "-" if r["unchanged"] is None else ("yes" if r["unchanged"] else "NO")])
    lines.append(markdown_table(["file", "sha256 (results)", "unchanged here"], rows))
    return lines


def render_markdown(payload: dict) -> str:
    gen = payload["generated"]["environment"]
    lines = [f"# {payload['title']}", "",
             f"**{overall(payload)}**. Built {gen.get('timestamp_utc')} from det-suite at "
             f"`{gen.get('git_revision')}`.", "",
             "## Results", "", results_table(payload), "",
             "## What ran", "", ran_table(payload), "",
             "## Skipped or not run, and why", "", *skipped_lines(payload), ""]
    for i, e in enumerate(payload["results"], 1):
        lines += [f"### {i}. {e['title']}: {STATUS_TEXT.get(e['status'], e['status'])}", "",
                  f"Raw data: [{e['link']}]({e['link']}); machine {e['machine'] or '?'}, "
                  f"revision `{e['revision'] or '?'}`, {e['timestamp'] or 'time not recorded'}."
                  + (f" Ran: {e['ran']}." if e["ran"] else ""), ""]
        lines += [f"- {line}" for line in e["headline"]]
        lines += [f"- plot: [{p['link']}]({p['link']})" for p in e["plots"]]
        lines.append("")
    lines += ["## Environment", "", environment_table(payload), "",
              "## Provenance", "", *provenance_lines(payload), ""]
    if payload["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in payload["notes"]] + [""]
    return "\n".join(lines)


def render_step_summary(payload: dict) -> str:
    """The short form for a CI job's summary page."""
    lines = [f"## {payload['title']}: {overall(payload)}", "", results_table(payload), "",
             "**Skipped or not run:**", "", *skipped_lines(payload), ""]
    missing = [c["title"] for c in payload["checks"] if not c["present"]]
    if missing:
        lines += [f"Not in this report: {', '.join(missing)}.", ""]
    k = payload["kernel_hashes"]
    if k["recorded_by"] and not k["consistent"]:
        lines += [f"**Kernel sources differ across results**: {', '.join(k['differ'])}.", ""]
    return "\n".join(lines)
