"""`det-suite lint-policy`: check that every tile a table lets M pick compiles to one MMA
instruction along K (see det_suite.lint). Needs no GPU."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "lint-policy",
        help="check tile tables compile to one MMA instruction along K per entry (no GPU)",
        description=(
            "Cross-compile every kernel variant a tile table can select to PTX (Triton, on "
            "CPU): each tile at its own and the overridden pipeline depths, TMA and pointer "
            "loads, split-K with the fused fix-up or the separate reduce kernel, single "
            "pass, K-tail and decode specialisations, launched exactly as det_suite.ops "
            "launches them. Check that all variants of each table entry use one MMA "
            "instruction family, one K step and one operand type. Without --table, lints "
            "the shipped tables (every family, 'default' included) on the compute "
            "capabilities they serve. Exit status 1 on any violation."),
    )
    parser.add_argument("--family", action="append", default=None, metavar="FAMILY",
                        help="shipped table to lint (repeatable; default: all shipped "
                             "families when --table is not given)")
    parser.add_argument("--table", default=None, metavar="PATH",
                        help="a candidate tile-table JSON file to lint")
    parser.add_argument("--arch", action="append", default=None, metavar="smXX",
                        help="compile target(s) instead of each table's own (repeatable), "
                             "e.g. --table seed.json --arch sm_90")
    parser.add_argument("--stages", default=None, metavar="LIST",
                        help="num_stages overrides to lint besides each tile's own, comma "
                             "separated (default 2,3; 'none' for the table's only)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="compile worker processes (default: CPU count, at most 8)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the result as JSON")
    parser.add_argument("--markdown", default=None, metavar="PATH",
                        help="write the result as Markdown")
    parser.add_argument("--ptx-dir", default=None, metavar="DIR",
                        help="also keep every compiled PTX listing in DIR")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="print every compiled variant, not one row per tile")
    parser.add_argument("--no-control", action="store_true",
                        help="skip the positive control, run unless --table or --arch is "
                             "given: the seed's table (shipped for SM12x) compiled for sm_90, "
                             "which must be flagged (exit 1 if it is not)")
    parser.set_defaults(handler=run)


# The positive control: the README's claim that the seed's table is not invariant on SM90
# (BLOCK_M 16/32 -> mma.sync k16, 128 -> wgmma k32), shown by every default run. If it ever
# stops being flagged, either Triton's lowering changed or the lint lost its teeth.
CONTROL_FAMILY, CONTROL_ARCH = "sm120", "sm_90"


def _control_line(control) -> str:
    what = (f"positive control: the seed's table ({CONTROL_FAMILY}, shipped for SM12x) "
            f"compiled for {CONTROL_ARCH}")
    if control.ok:
        return (f"{what} was NOT flagged: FAILED. Its tiles should mix mma.sync k16 and wgmma "
                "k32 there; the lint (or Triton's lowering) has changed")
    return f"{what} is flagged, as it must be: {control.violations[0]}"


def _stages(text: str | None) -> tuple[int, ...]:
    from det_suite.policy import validate_stages
    from det_suite.lint import OVERRIDE_STAGES

    if text is None:
        return OVERRIDE_STAGES
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        return tuple(validate_stages(int(part)) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"--stages {text!r}: {exc}") from None


def _environment() -> dict:
    from det_suite.reports.environment import environment

    try:
        return environment()
    except Exception as exc:  # the lint needs no GPU; don't let capture fail the run
        import platform

        import torch
        import triton

        from det_suite import __version__
        from det_suite.reports.provenance import source_hashes
        return {"environment_error": f"{type(exc).__name__}: {exc}",
                "python": platform.python_version(), "torch": torch.__version__,
                "triton": triton.__version__, "det_suite": __version__,
                "host": platform.node(), "source_sha256": source_hashes()}


def run(args: argparse.Namespace) -> int:
    from det_suite import lint
    from det_suite.reports.files import write_json_atomic, write_text_atomic

    try:
        stages = _stages(args.stages)
        arches = [lint.parse_arch(a) for a in args.arch] if args.arch else None
        pairs = []
        if args.family or not args.table:
            pairs += lint.shipped_pairs(args.family, arches)
        if args.table:
            pairs.append(lint.table_pair(args.table, arches))
        if args.jobs is not None and args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1; got {args.jobs}")
    except (ValueError, KeyError, OSError) as exc:
        print(f"det-suite lint-policy: error: {exc}", file=sys.stderr)
        return 2

    result = lint.lint(pairs, override_stages=stages, jobs=args.jobs, ptx_dir=args.ptx_dir)
    control = None
    if not (args.no_control or args.table or args.arch):
        control = lint.lint_shipped([CONTROL_FAMILY], arches=[CONTROL_ARCH],
                                    override_stages=stages, jobs=args.jobs,
                                    include_fixed=False)

    print(result.to_text(verbose=args.verbose))
    if control is not None:
        print("\n" + _control_line(control))
    if args.json:
        payload = {"lint": result.to_dict(), "environment": _environment()}
        if control is not None:
            payload["positive_control"] = {"table": CONTROL_FAMILY, "arch": CONTROL_ARCH,
                                           "flagged": not control.ok,
                                           "lint": control.to_dict()}
        write_json_atomic(args.json, payload)
    if args.markdown:
        markdown = result.to_markdown()
        if control is not None:
            markdown += f"\n{_control_line(control)}\n"
        write_text_atomic(args.markdown, markdown)
    return 0 if result.ok and (control is None or not control.ok) else 1

