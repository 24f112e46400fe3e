"""`det-suite gpu-suite --out DIR`: the one command a GPU runner (or the H200) runs.

Runs every GPU-marked test, the full invariance matrix, the GEMM benchmark and the
instruction lint, each in its own process so one failing step cannot hide the others, and
writes JUnit, JSON and Markdown into DIR plus a `gpu_suite.json` that says which step ran,
how long it took and how it ended. Skipped tests are counted as not run, never as passed.
Without a CUDA device it refuses at once (exit 2) and runs nothing.
"""

from __future__ import annotations

import sys

from det_suite.checks.gpu_suite import (STEP_NAMES, GpuSuiteSettings, parse_timeouts,
                                        run_gpu_suite)

EXIT_NO_GPU = 2  # as `det-suite bench`: this machine cannot run it (also usage errors)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "gpu-suite", help="run every GPU test, the invariance matrix, the benchmark and the lint",
        description=__doc__.split("\n\n")[1])
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for all results")
    parser.add_argument("--steps", default=",".join(STEP_NAMES),
                        help=f"comma-separated subset of {', '.join(STEP_NAMES)}, run in the "
                             "order given")
    parser.add_argument("--shapes", default="qwen3-8b",
                        help="shape preset for the benchmark (default qwen3-8b)")
    parser.add_argument("--require", default="gpu", metavar="MARKERS",
                        help="markers whose tests must run, not skip (pytest --det-require); "
                             "e.g. gpu,sm120 on an SM12x runner (default gpu)")
    parser.add_argument("--pytest-args", default="",
                        help="extra arguments for the pytest step (one string)")
    parser.add_argument("--bench-args", default="",
                        help="extra arguments for the benchmark step (one string), e.g. "
                             "'--max-geomean 1.10 --max-cell 1.30 --max-floor-ratio 1.3'")
    parser.add_argument("--invariance-args", default="",
                        help="extra arguments for the invariance step (one string), e.g. "
                             "'--providers det_suite:s2 det_suite:s3 control torch_scaled_mm'")
    parser.add_argument("--step-timeout", action="append", default=[], metavar="STEP=SECONDS",
                        help="wall-clock limit for one step (repeatable); a step that runs "
                             "out is recorded as timed out and the next step still runs")
    parser.set_defaults(handler=run, needs_kernels=False)


def run(args) -> int:
    from det_suite.bench.timing import GpuRequired

    try:
        settings = GpuSuiteSettings(
            out=args.out, steps=[s.strip() for s in args.steps.split(",") if s.strip()],
            shapes=args.shapes, require=args.require, pytest_args=args.pytest_args,
            bench_args=args.bench_args, invariance_args=args.invariance_args,
            step_timeouts=parse_timeouts(args.step_timeout))
    except ValueError as exc:
        print(f"gpu-suite: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_gpu_suite(settings)
    except GpuRequired as exc:
        print(f"det-suite {exc}: nothing was run. Without a GPU, run `det-suite run` and "
              "the tests (`pytest`); their kernels run on Triton's interpreter.",
              file=sys.stderr)
        return EXIT_NO_GPU
    summary = result.summary
    print("\nstep        exit   wall s")
    for r in summary["steps"]:
        note = "  (timed out)" if r["timed_out"] else ""
        print(f"{r['step']:<11} {r['exit_code']:>4} {r['wall_s']:>8}{note}")
    if summary["pytest"]:
        print("pytest: {passed} passed, {failures} failed, {errors} errors, {skipped} not run "
              "(skipped)".format(**summary["pytest"]))
    print(f"gpu-suite: {'OK' if result.ok else 'FAILED'} on {summary['environment']['machine']}"
          f"; results in {args.out}")
    return 0 if result.ok else 1
