"""`det-suite run`: the main job on its embedded default (det_suite.checks.main_job).

Answers "does the shipped FP8 kernel keep its determinism promise on this machine?" with
the invariance harness: cached-suffix, batch-composition and 2- vs 3-stage comparisons of
det-suite's kernel under this machine's tile table, with the deliberately M-dependent
positive control that must be flagged. CPU-sized on the Triton interpreter without a GPU,
the Qwen3-8B shapes on a GPU. Reports land in --out (JSON, Markdown, heatmap).
"""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run", help="quick determinism check of the shipped kernel on this machine",
        description=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--out", default="results/run", metavar="DIR",
                        help="folder for the reports (default results/run)")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from det_suite.checks.main_job import MainJobSettings, run_main_job
    from det_suite.invariance.harness import UsageError

    try:
        result = run_main_job(MainJobSettings(out=args.out))
    except UsageError as exc:
        print(f"det-suite run: error: {exc}", file=sys.stderr)
        return 2
    inv = result.invariance
    print(inv.table)
    for note in inv.notes:
        print(note)
    print("wrote " + ", ".join(inv.paths.values()) + f" ({inv.seconds:.1f} s)")
    if result.cache_hit is not None:
        from det_suite.checks.cache_hit_report import verdict_lines

        for line in verdict_lines(result.cache_hit):
            print(f"cache-hit: {line}")
        print(f"wrote {result.cache_hit_out}/cache_hit.md ({result.cache_hit.seconds:.1f} s)")
    for line in result.verdict_lines():
        print(f"det-suite run: {line}")
    if result.exit_code == 0:
        print(f"det-suite run: PASS - reports in {args.out}/ (invariance.md for a reviewer)")
    else:
        print(f"det-suite run: FAIL (exit {result.exit_code}) - see {args.out}/invariance.md "
              "for the first differing rows")
    return result.exit_code
