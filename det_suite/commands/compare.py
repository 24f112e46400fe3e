"""`det-suite compare A.json B.json`: fixed-work comparison of two runs of a check.

Holds two JSON results to the same bits, output by output: token sequences, texts (or text
hashes), token-id hashes and, where recorded, values such as logprobs; a recorded hash that
is not the hash of its own ids or text (an edited fixture) is a difference. Reads GSM8K runs
and fixtures (`det-suite gsm8k check`'s run.json, fixtures/gsm8k/...), cache-hit results
(cache_hit.json) and any check's {"kind": "outputs", ...} file (det_suite.checks.fixed_work).

Exit codes: 0 every output exact; 1 some output differs; 2 usage error (unreadable file);
3 not comparable (different checks, different outputs, or different inputs).
"""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="texts and token sequences exact between two runs of a check",
        description=__doc__.split("\n\n", 1)[1])
    p.add_argument("a", metavar="A.json")
    p.add_argument("b", metavar="B.json")
    p.add_argument("--subset", action="store_true",
                   help="compare the outputs both hold when one holds a subset of the other's")
    p.add_argument("--json", metavar="PATH", help="also write the comparison as JSON")
    p.set_defaults(handler=run, needs_kernels=False)


def run(args) -> int:
    from det_suite.checks.fixed_work import EXIT_USAGE, compare_files, verdict_lines

    try:
        result = compare_files(args.a, args.b, subset=args.subset)
    except ValueError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for line in verdict_lines(result):
        print(f"compare: {line}")
    if args.json:
        from det_suite.reports.environment import environment
        from det_suite.reports.files import write_json_atomic
        write_json_atomic(args.json, result.payload(environment()))
    return result.exit_code
