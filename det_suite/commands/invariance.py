"""`det-suite invariance`: bit-exact batch-invariance comparisons across FP8 providers.

Exit code: 0 when every provider that claims invariance was bit-exact in every comparison
and every positive control was flagged; 1 otherwise; 2 for a usage error (unknown provider
or shape, a named provider that cannot run here).
"""

from __future__ import annotations

import sys

from det_suite.invariance.harness import InvarianceSettings, UsageError, run_invariance

DESCRIPTION = """\
Compare FP8 linear providers bit for bit: the last m rows alone vs inside an M-row call
(cached suffix), rows among different neighbours (batch composition), CUDA Graph replay
at padded batch sizes vs eager, and 2- vs 3-stage pipelines (A/B). Prints a table
(provider x shape x M class) and writes invariance.json, invariance.md and
invariance_heatmap.png (the heatmap needs matplotlib) into --out.

--quick (the default without a GPU) runs CPU-sized shapes on the Triton interpreter;
--full (the default on a GPU) runs the eight Qwen3-8B/14B projection shapes and a K=80
tail with M up to 8192, BF16/FP16, with/without bias, contiguous/strided 3D, two seeds,
calibrated/saturated activations.
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "invariance", help="bit-exact batch-invariance comparisons across FP8 providers",
        description=DESCRIPTION, formatter_class=_formatter())
    p.add_argument("--providers", nargs="+", default=["auto"], metavar="P",
                   help="det_suite[:FAMILY][:sN][:smsC][:ws], control, reference_rowwise, "
                        "bf16_linear, torch_scaled_mm, "
                        "sglang_fp8_scaled_mm, flashinfer_bmm_fp8, sglang_apply_fp8_linear, "
                        "module:function, auto (default) or all")
    p.add_argument("--shapes", nargs="+", metavar="S",
                   help="qwen3-8b, qwen3-14b, k80-tail, gpu (all eight), cpu, or N,K "
                        "(default: gpu with --full, cpu with --quick)")
    p.add_argument("--m", nargs="+", type=int, metavar="M",
                   help="cached-suffix lengths (default: every BLOCK_M and power of two "
                        "+-1 up to --m-full)")
    p.add_argument("--m-full", type=int, metavar="M",
                   help="rows of the reference call (default 8192 with --full, 130 with "
                        "--quick; raised to the largest --m)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help="CPU-sized matrix (default without a GPU)")
    mode.add_argument("--full", action="store_true",
                      help="the full GPU matrix (default on a GPU)")
    p.add_argument("--dtypes", nargs="+", choices=("bf16", "fp16"), default=["bf16", "fp16"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--no-graph", action="store_true", help="skip CUDA Graph replay")
    p.add_argument("--no-claim", action="append", default=[], metavar="P",
                   help="measure provider P without it claiming invariance (repeatable)")
    p.add_argument("--claim", action="append", default=[], metavar="P",
                   help="make provider P claim invariance (repeatable)")
    p.add_argument("--expect-variant", action="append", default=[], metavar="P",
                   help="treat provider P as a positive control: the run fails unless it "
                        "is found non-invariant (repeatable)")
    p.add_argument("--device", help="cuda or cpu (default: cuda when present)")
    p.add_argument("--out", default="results/invariance",
                   help="folder for the reports (default results/invariance)")
    p.add_argument("--no-heatmap", action="store_true")
    p.add_argument("--no-instruction-table", action="store_true",
                   help="don't embed det-suite lint-policy's instruction table")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=run_command)


def _formatter():
    import argparse
    return argparse.RawDescriptionHelpFormatter


def _usage_error(message: str) -> int:
    print(f"det-suite invariance: error: {message}", file=sys.stderr)
    return 2


def settings_from_args(args) -> InvarianceSettings:
    return InvarianceSettings(
        out=args.out, providers=args.providers, shapes=args.shapes, suffix_ms=args.m,
        m_full=args.m_full, mode="full" if args.full else "quick" if args.quick else None,
        dtypes=args.dtypes, seeds=args.seeds, graph=not args.no_graph,
        no_claim=args.no_claim, claim=args.claim, expect_variant=args.expect_variant,
        device=args.device, heatmap=not args.no_heatmap,
        instruction_table=not args.no_instruction_table, quiet=args.quiet)


def run_command(args) -> int:
    import dataclasses
    from pathlib import Path

    from det_suite.reports.run_folder import staged_run

    settings = settings_from_args(args)
    out = Path(settings.out)
    try:
        # Reports are written beside --out and swapped in together at the end, so an
        # interrupted run never leaves a new invariance.json beside an older invariance.md.
        with staged_run(out) as (staging, _run_id):
            run = run_invariance(dataclasses.replace(settings, out=str(staging)))
    except UsageError as exc:
        return _usage_error(str(exc))
    run.paths = {k: str(out / Path(v).relative_to(staging)) for k, v in run.paths.items()}
    print(run.table)
    for note in run.notes:
        print(note)
    print("wrote " + ", ".join(run.paths.values()) + f" ({run.seconds:.1f} s)")
    return run.exit_code
