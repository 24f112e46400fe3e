"""`det-suite tune`: regenerate a tile table for the GPU this runs on (see det_suite.tune).

A shell over `det_suite.tune.tune_table`: arguments in, a `TuneJob` to it, its outcome out.

Exit codes: 0 the table was written (shapes whose every candidate was rejected keep the base
entry, which the output says); 1 an error while tuning; 2 usage error, no CUDA GPU, or a
--family that is not this GPU's (a table is tuned and proven on its own family).
"""

from __future__ import annotations

import sys

from det_suite.help_format import DefaultsHelpFormatter

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def register(subparsers) -> None:
    from det_suite.bench.gemm import SHAPE_PRESETS

    defaults = _defaults()
    parser = subparsers.add_parser(
        "tune", help="regenerate a tile table for this GPU (needs a CUDA GPU)",
        description="Time candidate tile-table entries for each (N, K) on this GPU, keep "
                    "the reduction (BLOCK_N, BLOCK_K, SPLIT_K) fixed per entry, pick the "
                    "fastest instruction-safe variant per M class, and store an entry only "
                    "after it passes the accuracy and bitwise batch-invariance checks. "
                    "Writes a policy JSON loadable with --policy-file.",
        formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["qwen3-8b"], metavar="SHAPE",
                        help=f"presets ({', '.join(SHAPE_PRESETS)}) or N,K / NAME=N,K")
    parser.add_argument("--out", required=True, metavar="PATH.json",
                        help="where to write the tuned policy (atomically)")
    parser.add_argument("--family", default="auto",
                        help="GPU family of the table; 'auto' = this GPU's (anything else "
                             "must equal it)")
    parser.add_argument("--base-policy", metavar="PATH",
                        help="table whose default and other entries the output keeps "
                             "(default: the shipped table of the family)")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="time budget for the whole run: each shape gets its share of "
                             "what is left (the first, which compiles most kernels, a double "
                             "share), 3/4 for the search and 1/4 to prove its entry (checks "
                             "are never skipped: the last may overrun)")
    parser.add_argument("--screen-m", nargs="+", type=int, default=list(defaults.screen_ms),
                        metavar="M", help="row counts every reduction is screened at")
    parser.add_argument("--m", nargs="+", type=int, default=list(defaults.class_ms),
                        metavar="M", help="row counts (M classes) finalists are swept at")
    parser.add_argument("--block-n", nargs="+", type=int, default=list(defaults.block_ns))
    parser.add_argument("--block-k", nargs="+", type=int, default=None,
                        help="BLOCK_K values to try (default: the family's FP32 promotion "
                             "interval, 256 on sm90; 128 where the family has none)")
    parser.add_argument("--split-k", nargs="+", type=int, default=list(defaults.split_ks))
    parser.add_argument("--warps", nargs="+", type=int, default=list(defaults.warps))
    parser.add_argument("--stages", nargs="+", type=int, default=list(defaults.stages))
    parser.add_argument("--no-tma", action="store_true",
                        help="do not try TMA loads (they are tried on sm90/sm100/sm120)")
    parser.add_argument("--keep", type=int, default=defaults.keep,
                        help="finalist reductions swept after screening")
    parser.add_argument("--check-m", nargs="+", type=int, default=list(defaults.check_ms),
                        metavar="M", help="row counts compared bitwise with the big call")
    parser.add_argument("--check-big-m", type=int, default=defaults.check_big_m)
    parser.add_argument("--check-data", nargs="+", choices=("dense", "stress"),
                        default=list(defaults.check_data),
                        help="operand sets the invariance check runs on, in order (stress: "
                             "cancelling products that expose any regrouping of the sum)")
    parser.add_argument("--warmup-ms", type=float, default=defaults.warmup_ms)
    parser.add_argument("--rep-ms", type=float, default=defaults.rep_ms)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--no-parallel-compile", action="store_true",
                        help="compile kernels at first launch instead of in parallel threads")
    parser.add_argument("--compile-workers", type=int, default=None)
    parser.set_defaults(handler=run_tune)


def _defaults():
    # Plain values (no torch import): mirrors det_suite.tune's constants (a test checks).
    from types import SimpleNamespace

    return SimpleNamespace(screen_ms=(1, 16, 128, 2048, 8192),
                           class_ms=(1, 16, 64, 128, 512, 2048, 8192),
                           block_ns=(64, 128, 256), block_ks=None,
                           split_ks=(1, 2, 3, 4, 6, 8), warps=(4, 8), stages=(3, 4, 5),
                           keep=3, check_ms=(1, 7, 16, 33, 64, 65, 127, 129),
                           check_big_m=4097, check_data=("dense", "stress"), warmup_ms=5.0,
                           rep_ms=20.0, seed=0)


def settings_from_args(args):
    from det_suite.tune import TuneSettings

    return TuneSettings(
        family=args.family, screen_ms=tuple(args.screen_m), class_ms=tuple(args.m),
        block_ns=tuple(args.block_n), block_ks=tuple(args.block_k) if args.block_k else None,
        split_ks=tuple(args.split_k), warps=tuple(args.warps), stages=tuple(args.stages),
        keep=args.keep, budget_s=args.budget_s, check_ms=tuple(args.check_m),
        check_big_m=args.check_big_m, check_data=tuple(args.check_data),
        tma=not args.no_tma, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms,
        seed=args.seed, parallel_compile=not args.no_parallel_compile,
        compile_workers=args.compile_workers)


def run_tune(args) -> int:
    from det_suite.bench.gemm import parse_shapes
    from det_suite.bench.timing import GpuRequired, gpu_problem

    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as exc:
        print(f"det-suite tune: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problem = gpu_problem("tune")
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_USAGE

    from det_suite.tune import TuneJob, TuneUsageError, tune_table

    job = TuneJob(shapes=shapes, out=args.out, settings=settings_from_args(args),
                  base_policy=args.base_policy)
    try:
        run = tune_table(job)
    except GpuRequired as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except TuneUsageError as exc:
        print(f"det-suite tune: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - reported, non-zero exit
        import traceback

        traceback.print_exc()
        print(f"det-suite tune: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(format_outcomes(run.outcomes))
    print(f"tuned {run.family} in {run.elapsed_s:.0f}s (budget {run.settings.budget_s:.0f}s); "
          f"wrote {args.out}")
    return EXIT_OK


def format_outcomes(outcomes) -> str:
    from det_suite.policy import m_tile_text

    lines = []
    for o in outcomes:
        head = f"{o.shape.name} {o.shape.dims}: {o.status}"
        if o.entry is not None:
            tiles = ", ".join(m_tile_text(t) for t in o.entry.m_tiles)
            head += f" {o.chosen} [{tiles}]"
        if o.rejected:
            head += "; rejected " + ", ".join(
                f"{r['reduction']} ({r['failure']['kind']} at m={r['first_differing_m']})"
                for r in o.rejected)
        if o.truncated:
            head += "; search truncated by the budget"
        lines.append(head)
    return "\n".join(lines)
