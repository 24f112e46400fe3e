"""`det-suite gpu-suite --out DIR`: the one command a GPU runner (or the H200) runs.

Runs every GPU-marked test, the full invariance matrix, the GEMM benchmark and the
instruction lint, each in its own process so one failing step cannot hide the others, and
writes JUnit, JSON and Markdown into DIR plus a `gpu_suite.json` that says which step ran,
how long it took and how it ended. Skipped tests are counted as not run, never as passed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from det_suite.platform.interpreter import environment_without_interpreter

STEP_NAMES = ("pytest", "invariance", "bench", "lint")
GPU_MARKERS = "gpu or graph or fp8 or sm90 or sm120"


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


def _parse_timeouts(items: list[str]) -> dict[str, float]:
    limits = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if name not in STEP_NAMES or seconds <= 0:
            raise ValueError(f"--step-timeout {item!r}: expected STEP=SECONDS with STEP one of "
                             f"{', '.join(STEP_NAMES)} and SECONDS > 0")
        limits[name] = seconds
    return limits


def _steps(out: Path, args) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "pytest": [py, "-m", "pytest", "-p", "det_suite.pytest_plugin", "-m", GPU_MARKERS,
                   f"--det-require={args.require}", "-q", "-rs", f"--junitxml={out / 'junit.xml'}",
                   *args.pytest_args.split()],
        "invariance": [py, "-m", "det_suite", "invariance", "--full", "--out", str(out),
                       *args.invariance_args.split()],
        "bench": [py, "-m", "det_suite", "bench", "gemm", "--shapes", args.shapes,
                  "--mode", "graph", "--mode", "flush", "--json", str(out / "bench.json"),
                  "--markdown", str(out / "bench.md"), *args.bench_args.split()],
        "lint": [py, "-m", "det_suite", "lint-policy", "--json", str(out / "lint.json")],
    }


def _junit_counts(path: Path) -> dict | None:
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites)
              for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def run(args) -> int:
    from det_suite.reports.environment import environment
    from det_suite.reports.files import write_json_atomic

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(STEP_NAMES))
    if unknown:
        print(f"gpu-suite: --steps has unknown step(s) {unknown}; expected some of "
              f"{', '.join(STEP_NAMES)}", file=sys.stderr)
        return 2
    try:
        limits = _parse_timeouts(args.step_timeout)
    except ValueError as exc:
        print(f"gpu-suite: {exc}", file=sys.stderr)
        return 2
    commands = _steps(out, args)
    env = environment_without_interpreter()  # a GPU run must never fall back to it
    results = []
    for name in wanted:
        print(f"gpu-suite: [{name}] {' '.join(commands[name])}", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            code = subprocess.run(commands[name], env=env, timeout=limits.get(name)).returncode
            timed_out = False
        except subprocess.TimeoutExpired:
            code, timed_out = 124, True
        results.append({"step": name, "command": commands[name], "exit_code": code,
                        "timed_out": timed_out, "wall_s": round(time.monotonic() - start, 1)})
        print(f"gpu-suite: [{name}] exit {code} in {results[-1]['wall_s']} s",
              file=sys.stderr, flush=True)
    pytest_counts = _junit_counts(out / "junit.xml") if "pytest" in wanted else None
    summary = {"environment": environment(), "steps": results, "pytest": pytest_counts,
               "ok": all(r["exit_code"] == 0 for r in results)}
    write_json_atomic(out / "gpu_suite.json", summary)
    print("\nstep        exit   wall s")
    for r in results:
        note = "  (timed out)" if r["timed_out"] else ""
        print(f"{r['step']:<11} {r['exit_code']:>4} {r['wall_s']:>8}{note}")
    if pytest_counts:
        print("pytest: {passed} passed, {failures} failed, {errors} errors, {skipped} not run "
              "(skipped)".format(**pytest_counts))
    print(f"gpu-suite: {'OK' if summary['ok'] else 'FAILED'} on {summary['environment']['machine']}"
          f"; results in {out}")
    return 0 if summary["ok"] else 1
