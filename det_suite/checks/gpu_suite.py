"""The GPU runner's job as a library call: every GPU-marked test, the full invariance
matrix, the GEMM benchmark and the instruction lint, each in its own process so one failing
step cannot hide the others. Results (JUnit, JSON, Markdown, and `gpu_suite.json` saying
which step ran, how long it took and how it ended) land in one folder. Skipped tests are
counted as not run, never as passed."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from det_suite.platform.interpreter import environment_without_interpreter

STEP_NAMES = ("pytest", "invariance", "bench", "lint")
GPU_MARKERS = "gpu or graph or fp8 or sm90 or sm120"


@dataclass(frozen=True)
class GpuSuiteSettings:
    out: str
    steps: Sequence[str] = STEP_NAMES            # run in this order
    shapes: str = "qwen3-8b"                     # the benchmark's shape preset
    require: str = "gpu"                         # pytest --det-require markers
    pytest_args: str = ""                        # extra arguments per step, one string each
    bench_args: str = ""
    invariance_args: str = ""
    step_timeouts: Mapping[str, float] = field(default_factory=dict)  # step -> seconds
    # Refuse up front without a usable GPU (the steps would run the full matrix on the
    # interpreter for many minutes before failing). Off only to test the orchestration.
    require_gpu: bool = True

    def __post_init__(self) -> None:
        unknown = sorted(set(self.steps) - set(STEP_NAMES))
        if unknown:
            raise ValueError(f"--steps has unknown step(s) {unknown}; expected some of "
                             f"{', '.join(STEP_NAMES)}")
        for name, seconds in self.step_timeouts.items():
            if name not in STEP_NAMES or not seconds > 0:
                raise ValueError(f"--step-timeout {name}={seconds}: expected STEP=SECONDS with "
                                 f"STEP one of {', '.join(STEP_NAMES)} and SECONDS > 0")


@dataclass
class GpuSuiteResult:
    summary: dict        # what gpu_suite.json holds
    path: Path

    @property
    def ok(self) -> bool:
        return self.summary["ok"]


def parse_timeouts(items: Sequence[str]) -> dict[str, float]:
    """'STEP=SECONDS' items -> {step: seconds}."""
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


def step_commands(out: Path, settings: GpuSuiteSettings) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "pytest": [py, "-m", "pytest", "-p", "det_suite.pytest_plugin", "-m", GPU_MARKERS,
                   f"--det-require={settings.require}", "-q", "-rs",
                   f"--junitxml={out / 'junit.xml'}", *shlex.split(settings.pytest_args)],
        "invariance": [py, "-m", "det_suite", "invariance", "--full", "--out", str(out),
                       *shlex.split(settings.invariance_args)],
        "bench": [py, "-m", "det_suite", "bench", "gemm", "--shapes", settings.shapes,
                  "--mode", "graph", "--mode", "flush", "--json", str(out / "bench.json"),
                  "--markdown", str(out / "bench.md"), *shlex.split(settings.bench_args)],
        "lint": [py, "-m", "det_suite", "lint-policy", "--json", str(out / "lint.json")],
    }


def junit_counts(path: Path) -> dict | None:
    """tests / failures / errors / skipped / passed from a JUnit file; None when absent."""
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites)
              for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def run_gpu_suite(settings: GpuSuiteSettings, *, log=None) -> GpuSuiteResult:
    """Run the steps; raises bench.timing.GpuRequired before anything runs (or is written)
    when torch sees no CUDA device and `settings.require_gpu`. (The steps themselves run
    without TRITON_INTERPRET, so a variable set in this process does not matter.)"""
    import torch

    from det_suite.bench.timing import NO_GPU_MESSAGE, GpuRequired
    from det_suite.reports.environment import environment
    from det_suite.reports.files import write_json_atomic

    if settings.require_gpu and not torch.cuda.is_available():
        raise GpuRequired(NO_GPU_MESSAGE.format(what="gpu-suite"))
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    commands = step_commands(out, settings)
    env = environment_without_interpreter()  # a GPU run must never fall back to it
    results = []
    for name in settings.steps:
        log(f"gpu-suite: [{name}] {' '.join(commands[name])}")
        start = time.monotonic()
        try:
            code = subprocess.run(commands[name], env=env,
                                  timeout=settings.step_timeouts.get(name)).returncode
            timed_out = False
        except subprocess.TimeoutExpired:
            code, timed_out = 124, True
        results.append({"step": name, "command": commands[name], "exit_code": code,
                        "timed_out": timed_out, "wall_s": round(time.monotonic() - start, 1)})
        log(f"gpu-suite: [{name}] exit {code} in {results[-1]['wall_s']} s")
    pytest_counts = junit_counts(out / "junit.xml") if "pytest" in settings.steps else None
    summary = {"environment": environment(), "steps": results, "pytest": pytest_counts,
               "ok": all(r["exit_code"] == 0 for r in results)}
    path = write_json_atomic(out / "gpu_suite.json", summary)
    return GpuSuiteResult(summary=summary, path=path)
