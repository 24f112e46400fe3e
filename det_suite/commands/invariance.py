"""`det-suite invariance`: bit-exact batch-invariance comparisons across FP8 providers.

Exit code: 0 when every provider that claims invariance was bit-exact in every comparison
and every positive control was flagged; 1 otherwise; 2 for a usage error (unknown provider
or shape, a named provider that cannot run here).
"""

from __future__ import annotations

import sys
import time

from det_suite.platform.interpreter import interpreter_active, use_interpreter

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
                   help="det_suite[:FAMILY][:sN], control, reference_rowwise, bf16_linear, "
                        "torch_scaled_mm, "
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
    p.add_argument("--out", default="invariance-report", help="folder for the reports")
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


def _prepare_device(requested: str | None) -> str:
    """Pick the device; on a machine without CUDA make sure kernels run on the interpreter
    (it must be set before det_suite.kernels is imported, which happens after this)."""
    import torch

    if requested is None:
        requested = "cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu"
    if requested not in ("cuda", "cpu") and not requested.startswith("cuda:"):
        raise ValueError(f"--device must be cuda or cpu; got {requested!r}")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA device")
    if requested == "cpu" and not interpreter_active():
        if "det_suite.kernels.fp8_scaled_mm" in sys.modules:
            raise ValueError("--device cpu needs TRITON_INTERPRET=1 set before det-suite's "
                             "kernels are imported; set it in the environment")
        use_interpreter("det-suite invariance: no GPU in use; TRITON_INTERPRET=1 set (kernels "
                        "run on the Triton interpreter)")
    return requested


def run_command(args) -> int:
    started = time.perf_counter()
    try:
        device = _prepare_device(args.device)
    except ValueError as exc:
        return _usage_error(str(exc))

    from det_suite.invariance import cases as cases_mod
    from det_suite.invariance import providers as providers_mod
    from det_suite.invariance import report, runner, verdict
    from det_suite.reports.environment import environment

    full = args.full or (not args.quick and device.startswith("cuda"))
    try:
        shapes = cases_mod.parse_shapes(args.shapes or (["gpu"] if full else ["cpu"]))
        m_full = args.m_full or (8192 if full else 130)
        if args.m:
            if min(args.m) < 1:
                raise ValueError("--m values must be >= 1")
            m_full = max(m_full, max(args.m))
        make_plan = cases_mod.full_plan if full else cases_mod.quick_plan
        plan = make_plan(m_full=m_full, suffix_ms=args.m, graph=not args.no_graph)
        make_matrix = cases_mod.full_matrix if full else cases_mod.quick_matrix
        cases = make_matrix(shapes, tuple(args.dtypes), tuple(args.seeds))
        graph_cases = () if args.no_graph else cases_mod.graph_matrix(
            shapes, tuple(args.dtypes), tuple(args.seeds))
        selection = providers_mod.resolve(args.providers, device, no_claim=args.no_claim,
                                          claim=args.claim,
                                          expect_variant=args.expect_variant)
    except (ValueError, TypeError, ImportError) as exc:
        return _usage_error(str(exc))
    if not selection.providers:
        return _usage_error("no provider can run here: " + "; ".join(
            f"{p.name}: {p.unavailable}" for p in selection.skipped))

    env = environment()
    progress = None if args.quiet else runner.stderr_progress
    if progress:
        progress(f"det-suite invariance on {env['machine']}: {'full' if full else 'quick'} "
                 f"matrix, {len(cases)} cases + {len(graph_cases)} graph cases, providers "
                 + ", ".join(p.name for p in selection.providers))
        for p in selection.skipped:
            progress(f"  skipped {p.name}: {p.unavailable}")
    result = runner.run(selection.providers, cases, plan, device, graph_cases=graph_cases,
                        progress=progress)
    all_verdicts = verdict.verdicts(selection.providers, result.recorder)
    code = verdict.exit_code(all_verdicts)
    families = [p.family for p in selection.providers if p.family]
    instructions = ({"available": False, "reason": "--no-instruction-table"}
                    if args.no_instruction_table else report.instruction_table(families))
    config = {"command": sys.argv, "mode": "full" if full else "quick", "device": device,
              "providers_requested": args.providers, "shapes": [s.__dict__ for s in shapes],
              "dtypes": args.dtypes, "seeds": args.seeds, "no_claim": args.no_claim,
              "claim": args.claim, "expect_variant": args.expect_variant}
    payload = report.build_payload(result, all_verdicts, env, config,
                                   skipped=selection.skipped, instructions=instructions,
                                   exit_code=code)
    print(report.format_table(payload))
    paths, notes = report.write_reports(args.out, payload, heatmap=not args.no_heatmap)
    for note in notes:
        print(note)
    print("wrote " + ", ".join(paths.values())
          + f" ({time.perf_counter() - started:.1f} s)")
    return code
