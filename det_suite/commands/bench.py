"""`det-suite bench gemm`: det-suite's FP8 GEMM vs the vendor GEMMs, side by side.

Exit codes: 0 ran, every det-suite result correct; 1 an error or a wrong result (no time is
reported for it); 2 usage error or no CUDA GPU (speed never comes from the interpreter);
3 the opt-in speed gate (--max-geomean / --max-cell) failed.
"""

from __future__ import annotations

import argparse
import json
import sys

EXIT_OK, EXIT_ERROR, EXIT_NO_GPU, EXIT_GATE = 0, 1, 2, 3


def register(subparsers) -> None:
    from det_suite.bench.gemm import (DEFAULT_MODES, DEFAULT_MS, FLOOR_GATE_MAX_M, FLOOR_MAX_M,
                                      SHAPE_PRESETS)
    from det_suite.bench import MODES

    bench = subparsers.add_parser(
        "bench", help="kernel benchmarks (need a CUDA GPU)",
        description="Kernel benchmarks on a CUDA GPU. Never under TRITON_INTERPRET.")
    bench.set_defaults(handler=lambda args: (bench.print_help(sys.stderr), EXIT_NO_GPU)[1])
    sub = bench.add_subparsers(dest="bench_command", metavar="<benchmark>")
    gemm = sub.add_parser(
        "gemm", help="FP8 scaled-MM: det-suite vs torch._scaled_mm and other vendors",
        description="Time det-suite's fp8_scaled_mm against every available vendor FP8 GEMM "
                    "on the same quantized inputs, per (N, K) shape and M. Each det-suite "
                    "output is checked against torch._scaled_mm first; a wrong result gets "
                    "no time and a non-zero exit.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
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
    gemm.set_defaults(handler=run_gemm)


_CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3, "split_k": 1, "group_m": 8,
                    "use_workspace": False, "use_tma": False, "fused_fixup": True,
                    "use_pdl": False, "swap_ab": False}
_CONFIG_FLAGS = ("use_workspace", "use_tma", "fused_fixup", "use_pdl", "swap_ab")
_CONFIG_REQUIRED = ("block_m", "block_n", "block_k")


def parse_config_spec(spec: str) -> dict:
    """`--config` text (JSON object or k=v,k=v) -> LaunchConfig fields, defaults filled."""
    spec = spec.strip()
    if spec.startswith("{"):
        raw = json.loads(spec)
    else:
        raw = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            if "=" not in part:
                raise ValueError(f"--config: {part!r} is not key=value")
            key, value = (s.strip() for s in part.split("=", 1))
            raw[key] = value.lower() in ("1", "true", "yes") if key in _CONFIG_FLAGS \
                else int(value)
    allowed = set(_CONFIG_REQUIRED) | set(_CONFIG_DEFAULTS)
    unknown = set(raw) - allowed
    if unknown:
        raise ValueError(f"--config: unknown field(s) {', '.join(sorted(unknown))}; "
                         f"expected {', '.join(sorted(allowed))}")
    missing = [key for key in _CONFIG_REQUIRED if key not in raw]
    if missing:
        raise ValueError(f"--config: missing {', '.join(missing)}")
    return {**_CONFIG_DEFAULTS, **raw}


def config_policy(fields: dict, family: str):
    """A one-entry policy that serves `fields` for every (N, K) and M (validated like a
    shipped table)."""
    from det_suite.policy import parse_policy

    raw = {"family": family, "expected_mma": "", "default": {
        "block_n": fields["block_n"], "block_k": fields["block_k"],
        "split_k": fields["split_k"], "group_m": fields["group_m"],
        "m_tiles": [{"max_m": None, "block_m": fields["block_m"],
                     "num_warps": fields["num_warps"], "num_stages": fields["num_stages"],
                     **{flag: bool(fields[flag]) for flag in _CONFIG_FLAGS}}]}}
    return parse_policy(raw, f"--config {json.dumps(fields, sort_keys=True)}")


def run_gemm(args) -> int:
    from det_suite.bench.gemm import (DEFAULT_MODES, FLOOR_GATE_MAX_M, format_markdown,
                                      format_mode_table, gate_failures, parse_ms, parse_shapes)
    from det_suite.bench.timing import gpu_problem

    try:
        shapes = parse_shapes(args.shapes)
        ms = parse_ms(args.m)
        config_fields = parse_config_spec(args.config) if args.config else None
    except ValueError as exc:
        print(f"det-suite bench gemm: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    modes = list(dict.fromkeys(getattr(args, "mode", None) or DEFAULT_MODES))
    gated = list(dict.fromkeys(args.gate_mode or modes))
    unknown = [m for m in gated if m not in modes]
    if unknown:
        print(f"det-suite bench gemm: --gate-mode {' '.join(unknown)} is not among the modes "
              f"run ({' '.join(modes)})", file=sys.stderr)
        return EXIT_NO_GPU
    problem = gpu_problem("bench gemm")
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_NO_GPU

    from det_suite.platform.family import device_family
    from det_suite.bench.gemm import run_gemm_bench
    from det_suite.policy import load_policy_file
    from det_suite.reports.environment import environment
    from det_suite.reports.files import write_json_atomic, write_text_atomic

    family = device_family()
    try:
        if config_fields is not None:
            policy = config_policy(config_fields, family)
        elif args.policy_file:
            policy = load_policy_file(args.policy_file)
        else:
            policy = None
    except (OSError, ValueError, KeyError) as exc:
        print(f"det-suite bench gemm: cannot load the policy: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    if policy is not None and policy.family != family:
        print(f"warning: policy {policy.source} is for {policy.family}, this GPU is {family}; "
              "its invariance was not proven here", file=sys.stderr)
    try:
        run = run_gemm_bench(shapes, ms, modes, policy=policy, vendor_names=args.vendors,
                             warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, seed=args.seed,
                             floor_max_m=args.floor_max_m)
    except ValueError as exc:
        print(f"det-suite bench gemm: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    except Exception as exc:  # noqa: BLE001 - e.g. a CUDA error: reported, exit 1
        import traceback

        traceback.print_exc()
        print(f"det-suite bench gemm: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    run.environment = environment()
    vendor_names = list(run.vendors)
    for mode in modes:
        print(format_mode_table(mode, run.cells[mode], vendor_names))
        print()
    failures = gate_failures({m: s for m, s in run.summaries().items() if m in gated},
                             max_geomean=args.max_geomean, max_cell=args.max_cell,
                             max_floor_ratio=args.max_floor_ratio)
    payload = run.to_json()
    payload["gate"] = {"max_geomean": args.max_geomean, "max_cell": args.max_cell,
                       "max_floor_ratio": args.max_floor_ratio, "modes": list(gated),
                       "floor_gate_max_m": FLOOR_GATE_MAX_M, "failures": failures}
    if args.json:
        write_json_atomic(args.json, payload)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.markdown:
        write_text_atomic(args.markdown, format_markdown(run))
        print(f"wrote {args.markdown}", file=sys.stderr)
    if run.failed:
        print("FAILED: det-suite produced wrong results or errors (see ERROR lines)",
              file=sys.stderr)
        return EXIT_ERROR
    if failures:
        for failure in failures:
            print(f"GATE: {failure}", file=sys.stderr)
        return EXIT_GATE
    return EXIT_OK
