"""`det-suite bench gemm`: det-suite's FP8 GEMM vs the vendor GEMMs, side by side.
`det-suite bench e2e`: end-to-end A/B timing of engine configurations across boots.

Exit codes (gemm): 0 ran, every det-suite result correct; 1 an error or a wrong result (no
time is reported for it); 2 usage error or no CUDA GPU (speed never comes from the
interpreter); 3 the opt-in speed gate (--max-geomean / --max-cell) failed.
Exit codes (e2e): 0 every boot ran (and every gate set held); 1 a boot failed; 2 usage
error; 3 a gate failed; 130 interrupted (finished boots kept, aggregate marked incomplete).
"""

from __future__ import annotations

import argparse
import sys

from det_suite.help_format import DefaultsHelpFormatter

EXIT_OK, EXIT_ERROR, EXIT_NO_GPU, EXIT_GATE = 0, 1, 2, 3


def register(subparsers) -> None:
    from det_suite.bench.gemm import (DEFAULT_MODES, DEFAULT_MS, FLOOR_GATE_MAX_M, FLOOR_MAX_M,
                                      SHAPE_PRESETS)
    from det_suite.bench import MODES

    bench = subparsers.add_parser(
        "bench", help="kernel benchmarks (need a CUDA GPU) and end-to-end A/B timing",
        description="Kernel benchmarks on a CUDA GPU, never under TRITON_INTERPRET; "
                    "end-to-end A/B timing of engine boots (runs on a CPU too, where its "
                    "timings are not speed claims).")
    bench.set_defaults(handler=lambda args: (bench.print_help(sys.stderr), EXIT_NO_GPU)[1])
    sub = bench.add_subparsers(dest="bench_command", metavar="<benchmark>")
    gemm = sub.add_parser(
        "gemm", help="FP8 scaled-MM: det-suite vs torch._scaled_mm and other vendors",
        description="Time det-suite's fp8_scaled_mm against every available vendor FP8 GEMM "
                    "on the same quantized inputs, per (N, K) shape and M. Each det-suite "
                    "output is checked against torch._scaled_mm first; a wrong result gets "
                    "no time and a non-zero exit.",
        formatter_class=DefaultsHelpFormatter)
    gemm.add_argument("--shapes", nargs="+", default=["qwen3-8b"], metavar="SHAPE",
                      help=f"presets ({', '.join(SHAPE_PRESETS)}) or N,K / NAME=N,K")
    gemm.add_argument("--m", nargs="+", type=int, default=list(DEFAULT_MS), metavar="M",
                      help="row counts")
    gemm.add_argument("--mode", action="append", choices=MODES, default=argparse.SUPPRESS,
                      help=f"timing mode, repeatable (default: {' '.join(DEFAULT_MODES)})")
    gemm.add_argument("--policy-file", metavar="PATH",
                      help="tile policy JSON (e.g. from `det-suite tune`); default: the "
                           "shipped table for this GPU's family")
    gemm.add_argument("--config", metavar="SPEC",
                      help="pin one launch config for every cell, as JSON or k=v pairs, "
                           "e.g. block_m=64,block_n=128,block_k=128,split_k=2,num_warps=4,"
                           "num_stages=4,use_workspace=1,use_tma=0,fused_fixup=1 "
                           "(overrides --policy-file)")
    gemm.add_argument("--vendors", nargs="+", metavar="NAME",
                      help="vendor GEMMs to compare (default: all available; "
                           "torch_scaled_mm is always included as the reference)")
    gemm.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    gemm.add_argument("--markdown", metavar="PATH", help="write a Markdown summary")
    gemm.add_argument("--warmup-ms", type=float, default=25.0)
    gemm.add_argument("--rep-ms", type=float, default=100.0)
    gemm.add_argument("--seed", type=int, default=0)
    gemm.add_argument("--floor-max-m", type=int, default=FLOOR_MAX_M,
                      help="report the weight-bytes floor ratio for M up to this")
    gemm.add_argument("--max-geomean", type=float, metavar="X",
                      help="gate: fail (exit 3) if a mode's geometric-mean ratio exceeds X")
    gemm.add_argument("--max-cell", type=float, metavar="Y",
                      help="gate: fail (exit 3) if any cell's ratio exceeds Y")
    gemm.add_argument("--gate-mode", action="append", choices=MODES, default=None,
                      metavar="MODE", help="apply the gates to this timing mode only "
                                           "(repeatable; default: every mode run)")
    gemm.add_argument("--max-floor-ratio", type=float, metavar="Z",
                      help=f"gate: fail (exit 3) if a cell with M <= {FLOOR_GATE_MAX_M} takes "
                           "more than Z times the weight-bytes floor (weight bytes / measured "
                           "copy bandwidth)")
    gemm.add_argument("--fp64-error", action="store_true",
                      help="per cell, also measure det-suite's and torch._scaled_mm's error "
                           "against an fp64 product of the same quantized operands "
                           "(positive-mean activations, so partial sums grow with K)")
    gemm.add_argument("--max-error-ratio", type=float, metavar="R",
                      help="gate: fail (exit 3) if a cell's fp64 error exceeds R times "
                           "torch._scaled_mm's (cuBLAS default accumulation); implies "
                           "--fp64-error")
    gemm.set_defaults(handler=run_gemm)
    register_e2e(sub)


def settings_from_args(args):
    from det_suite.bench.gemm import GemmBenchSettings

    return GemmBenchSettings(
        shapes=tuple(args.shapes), ms=tuple(args.m), modes=getattr(args, "mode", None),
        policy_file=args.policy_file, config=args.config, vendors=args.vendors,
        warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, seed=args.seed,
        floor_max_m=args.floor_max_m, max_geomean=args.max_geomean, max_cell=args.max_cell,
        max_floor_ratio=args.max_floor_ratio, gate_modes=args.gate_mode,
        fp64_error=args.fp64_error or args.max_error_ratio is not None,
        max_error_ratio=args.max_error_ratio)


def run_gemm(args) -> int:
    """Parse -> `bench_gemm` -> print the tables, write the reports, map to an exit code."""
    from det_suite.bench.gemm import BenchUsageError, bench_gemm
    from det_suite.bench.timing import GpuRequired

    try:
        result = bench_gemm(settings_from_args(args))
    except BenchUsageError as exc:
        print(f"det-suite bench gemm: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    except GpuRequired as exc:
        print(exc, file=sys.stderr)
        return EXIT_NO_GPU
    except Exception as exc:  # noqa: BLE001 - e.g. a CUDA error: reported, exit 1
        import traceback

        traceback.print_exc()
        print(f"det-suite bench gemm: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for table in result.tables():
        print(table)
        print()
    write_reports(result, json_path=args.json, markdown_path=args.markdown)
    if result.failed:
        print("FAILED: det-suite produced wrong results or errors (see ERROR lines)",
              file=sys.stderr)
        return EXIT_ERROR
    if result.gate_failures:
        for failure in result.gate_failures:
            print(f"GATE: {failure}", file=sys.stderr)
        return EXIT_GATE
    return EXIT_OK


def write_reports(result, *, json_path: str | None, markdown_path: str | None) -> None:
    from det_suite.reports.files import write_json_atomic, write_text_atomic

    if json_path:
        write_json_atomic(json_path, result.payload)
        print(f"wrote {json_path}", file=sys.stderr)
    if markdown_path:
        write_text_atomic(markdown_path, result.markdown())
        print(f"wrote {markdown_path}", file=sys.stderr)


# ------------------------------------------------------------------ bench e2e

def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated ints, got {text!r}") from None


def _temperature(text: str) -> float | None:
    if text.lower() in ("off", "none"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected degrees C or 'off', got {text!r}") from None


def register_e2e(sub) -> None:
    from det_suite.bench.e2e import DEFAULT_ORDER, PRESETS
    from det_suite.bench.e2e.arms import DEFAULT_GATE_TIMEOUT_S, DEFAULT_MAX_TEMP_C

    e2e = sub.add_parser(
        "e2e", help="end-to-end A/B timing of engine configurations, fresh boot per arm",
        description="Time named engine configurations (arms) end to end: per boot (a fresh "
                    "process), one warm-up and N samples per prefix x batch cell, forced "
                    "output length, cache flushed before each request, a thermal gate before "
                    "each sample. Prefill, decode step and end to end reported separately; "
                    "pooled medians, per-boot medians and ranges, arm / A ratios with a "
                    "bootstrap interval, every sample. Writes e2e.json, e2e.md and "
                    "e2e_samples.png into --out.",
        formatter_class=DefaultsHelpFormatter)
    e2e.add_argument("--model", default="synthetic:tiny?seed=0",
                     help="PATH, hub id or synthetic:<preset>?seed=S")
    e2e.add_argument("--out", default="results/e2e", metavar="DIR")
    e2e.add_argument("--arm", action="append", metavar="NAME=SPEC",
                     help="an arm, repeatable, lettered A, B, ... in order: "
                          "NAME=mode=det|fast-stock|stock|m-dependent,graph=on|off,stages=N|table,"
                          "backend=embedded "
                          "(default: stock=mode=fast-stock and det=mode=det, graph on with CUDA; "
                          "the older unfused control: control=mode=stock)")
    e2e.add_argument("--order", default=DEFAULT_ORDER,
                     help="boot order by arm letter, one fresh process per letter")
    e2e.add_argument("--preset", choices=tuple(PRESETS),
                     help="full: prefixes 128,2048,8192 x batches 1,4, 32 tokens, 1 warm-up + 5 "
                          "samples (default with CUDA); small: CPU-sized (default without)")
    for name in ("prefixes", "batches"):
        e2e.add_argument(f"--{name}", metavar="N,N", help=f"override the preset's {name}")
    for name in ("output-tokens", "warmup", "samples", "page-size"):
        e2e.add_argument(f"--{name}", type=int, metavar="N",
                         help=f"override the preset's {name.replace('-', ' ')}")
    e2e.add_argument("--seed", type=int, default=0, help="prompt token ids and bootstrap")
    e2e.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    e2e.add_argument("--max-temp", type=_temperature, default=DEFAULT_MAX_TEMP_C,
                     metavar="C", help="thermal gate: before each sample wait until the GPU "
                                       "is at or under C degrees ('off': no gate)")
    e2e.add_argument("--gate-timeout", type=float, default=DEFAULT_GATE_TIMEOUT_S,
                     metavar="S", help="longest wait per sample; a sample taken after a "
                                       "timeout is flagged")
    e2e.add_argument("--no-floor", action="store_true",
                     help="skip the copy-bandwidth probe behind the decode floor")
    e2e.add_argument("--max-ratio", type=float, metavar="X",
                     help="gate (GPU only): fail (exit 3) if any cell's end-to-end arm / A "
                          "ratio exceeds X (e.g. 1.05)")
    e2e.add_argument("--max-decode-floor-ratio", type=float, metavar="Z",
                     help="gate (GPU only): fail (exit 3) if a batch-1 CUDA Graph decode step "
                          "takes more than Z times the weight-read floor (e.g. 1.5)")
    e2e.add_argument("--boot-timeout", type=float, metavar="S",
                     help="stop a boot that has not finished after S seconds")
    again = e2e.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="keep the finished boots of the same plan in --out, run the rest")
    again.add_argument("--force", action="store_true",
                       help="delete a previous run's files in --out and start over")
    e2e.set_defaults(handler=run_e2e)


def e2e_settings_from_args(args):
    import torch

    from det_suite.bench.e2e import PRESETS, E2ESettings, default_arms, parse_arm

    cuda = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    values = dict(PRESETS[args.preset or ("full" if cuda else "small")])
    for name in ("prefixes", "batches"):
        if getattr(args, name):
            values[name] = _ints(getattr(args, name), name)
    for name in ("output_tokens", "warmup", "samples", "page_size"):
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    arms = tuple(parse_arm(a) for a in args.arm) if args.arm else default_arms(cuda)
    return E2ESettings(
        out=args.out, model=args.model, arms=arms, order=args.order, seed=args.seed,
        device=args.device, max_temp_c=args.max_temp, gate_timeout_s=args.gate_timeout,
        measure_floor=not args.no_floor, max_ratio=args.max_ratio,
        max_decode_floor_ratio=args.max_decode_floor_ratio, resume=args.resume,
        force=args.force, boot_timeout_s=args.boot_timeout,
        progress=lambda line: print(f"bench e2e: {line}", file=sys.stderr, flush=True),
        **values)


def run_e2e(args) -> int:
    """Parse -> `bench_e2e` -> print the headline and where the reports are."""
    from det_suite.bench.e2e import EXIT_USAGE, E2EUsageError, bench_e2e

    try:
        settings = e2e_settings_from_args(args)
        result = bench_e2e(settings, bar=True)
    except (ValueError, E2EUsageError) as exc:
        print(f"det-suite bench e2e: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for line in result.payload["headline"]:
        print(f"bench e2e: {line}")
    for failure in result.payload["gate"]["failures"]:
        print(f"GATE: {failure}", file=sys.stderr)
    if result.payload["failure"]:
        print(f"FAILED: {result.payload['failure']}", file=sys.stderr)
    print("bench e2e: wrote " + ", ".join(result.paths.values()))
    return result.exit_code
