"""`det-suite report`: one reproducibility report from the JSON results of any checks.

Give result files (.json or .json.gz) or folders to search: invariance, lint, GEMM bench,
cache-hit, GSM8K, e2e and gpu-suite results are read by layout, any other check's by its
kind / schema field and headline. Writes repro.json, repro.md (for a pull request),
repro_summary.md (for $GITHUB_STEP_SUMMARY) and repro.html (plots embedded) into --out.
Exit 0 when every result passed, 1 when one failed or is incomplete, 2 for a usage error
(no results, an unreadable file, no browser for --screenshot), 3 when a run folder mixes
results of two runs; inputs from different runs or git revisions are noted.
"""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="one reproducibility report from the results of any checks",
        description=__doc__.split("\n\n")[1])
    p.add_argument("inputs", nargs="+", metavar="RESULT",
                   help="result JSON files (.json / .json.gz) or folders holding them")
    p.add_argument("--out", default="results/report", metavar="DIR")
    p.add_argument("--title", default="det-suite reproducibility report")
    p.add_argument("--step-summary", nargs="?", const="", default=None, metavar="PATH",
                   help="add the short summary to PATH (no PATH: $GITHUB_STEP_SUMMARY)")
    p.add_argument("--screenshot", action="store_true",
                   help="also write repro.png: the HTML page in a headless browser "
                        "(playwright, or chromium on PATH)")
    p.set_defaults(handler=run, needs_kernels=False)


def run(args) -> int:
    from det_suite.reports.repro import ReportInputError, ReportSettings, make_report
    from det_suite.reports.repro.screenshot import ScreenshotUnavailable

    try:
        result = make_report(ReportSettings(
            inputs=tuple(args.inputs), out=args.out, title=args.title,
            step_summary=args.step_summary, screenshot=args.screenshot))
    except (ReportInputError, ScreenshotUnavailable, ValueError) as exc:
        print(f"det-suite report: {exc}", file=sys.stderr)
        return 2
    from det_suite.reports.repro.render import overall

    for entry in result.payload["results"]:
        print(f"report: {entry['title']}: {entry['status'].upper()} - "
              f"{entry['headline'][0] if entry['headline'] else '-'}")
    for note in result.notes + result.payload["notes"]:
        print(f"report: note: {note}")
    for reason in result.payload.get("not_comparable", []):
        print(f"report: NOT COMPARABLE: {reason}")
    print(f"report: {overall(result.payload)}; wrote {', '.join(result.paths.values())}")
    return result.exit_code
