"""Cross-compiling compile jobs to PTX in worker subprocesses, and the outcomes' cache.

Compilation runs in worker subprocesses (`python -m det_suite.lint --compile-worker`)
whose environment has the interpreter switch removed
(`platform.interpreter.environment_without_interpreter`): under Triton's interpreter
`triton.jit` returns InterpretedFunction objects, which cannot be compiled, and CPU CI runs
the test-suite with the interpreter on. The parent process never compiles, so the lint
works identically with or without the interpreter on. A worker imports neither torch nor
det_suite's launcher; it also checks each launch's argument names and positional order
against the kernel's parameters, and stops Triton's pipeline at PTX (no ptxas; see
`stop_at_ptx`). Results are cached per (kernel, signature, constants, options, target) for
the life of the process, and on disk by Triton (in the `det-suite-policy-lint-ptx`
subdirectory of its cache directory), which makes repeated runs take seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from det_suite.lint.jobs import CompileJob
from det_suite.lint.ptx_grid_dependency import grid_dependency_order
from det_suite.lint.ptx_instructions import MmaInstruction, parse_mma_instructions
from det_suite.lint.ptx_promotion import promotion_groups

# A compile error with this text means the target lacks the operand type altogether
# (e.g. fp8e4nv before sm_89): the kernel cannot run there, so there is nothing to lint.
_UNSUPPORTED_RE = re.compile(r"not supported in this architecture")
# Subdirectory of Triton's cache directory for the lint's PTX-only compiles.
PTX_CACHE_SUBDIR = "det-suite-policy-lint-ptx"
WORKER_MODULE = "det_suite.lint"
WORKER_FLAG = "--compile-worker"


@dataclass
class CompileOutcome:
    ok: bool
    instructions: list[MmaInstruction]
    error: str | None = None
    seconds: float = 0.0
    ptx_sha256: str | None = None
    ptx_path: str | None = None
    grid_dependency: dict | None = None  # ptx_grid_dependency.GridDependencyOrder, as data
    promotion_groups: list[int] | None = None  # ptx_promotion.promotion_groups

    @property
    def unsupported(self) -> bool:
        return not self.ok and bool(self.error and _UNSUPPORTED_RE.search(self.error))


# Per-process cache: job key -> outcome. Entries of different tables often share variants.
OUTCOMES: dict[str, CompileOutcome] = {}
_MMA_FIELDS = set(MmaInstruction.__dataclass_fields__)


# ------------------------------------------------------------------- parent side

def worker_env() -> dict[str, str]:
    """The compile workers' environment: this process's, without the interpreter switch,
    with det_suite importable."""
    from det_suite.platform.interpreter import environment_without_interpreter

    env = environment_without_interpreter()
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def default_jobs() -> int:
    """Worker processes: the CPUs this process may use, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def _outcome(result: dict) -> CompileOutcome:
    return CompileOutcome(
        ok=result["ok"],
        instructions=[MmaInstruction(**{k: v for k, v in rec.items() if k in _MMA_FIELDS})
                      for rec in result["instructions"]],
        error=result.get("error"), seconds=result.get("seconds", 0.0),
        ptx_sha256=result.get("ptx_sha256"), ptx_path=result.get("ptx_path"),
        grid_dependency=result.get("grid_dependency"),
        promotion_groups=result.get("promotion_groups"))


def compile_all(jobs: list[CompileJob], workers: int, ptx_dir: str | None) -> tuple[int, int]:
    """Compile every job not yet in `OUTCOMES`; returns (compiled, cache hits)."""
    unique: dict[str, CompileJob] = {}
    for job in jobs:
        unique.setdefault(job.key, job)
    pending = [job for key, job in unique.items() if key not in OUTCOMES]
    hits = len(unique) - len(pending)
    if not pending:
        return 0, hits
    workers = max(1, min(workers, len(pending)))
    chunks = [pending[i::workers] for i in range(workers)]
    env = worker_env()
    with tempfile.TemporaryDirectory(prefix="det-suite-lint-") as tmp:
        procs = []
        for i, chunk in enumerate(chunks):
            jobs_path = Path(tmp, f"jobs{i}.json")
            out_path = Path(tmp, f"out{i}.json")
            log_path = Path(tmp, f"log{i}.txt")
            jobs_path.write_text(json.dumps([job.to_json() for job in chunk]))
            cmd = [sys.executable, "-m", WORKER_MODULE, WORKER_FLAG, str(jobs_path),
                   str(out_path)]
            if ptx_dir:
                cmd.append(str(ptx_dir))
            log = open(log_path, "w")
            procs.append((chunk, out_path, log_path, log,
                          subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)))
        for chunk, out_path, log_path, log, proc in procs:
            proc.wait()
            log.close()
            results = json.loads(out_path.read_text()) if out_path.exists() else None
            if results is None or len(results) != len(chunk):
                tail = log_path.read_text()[-2000:]
                for job in chunk:
                    OUTCOMES[job.key] = CompileOutcome(
                        ok=False, instructions=[],
                        error=f"compile worker exited with {proc.returncode}: {tail}")
                continue
            for job, result in zip(chunk, results):
                OUTCOMES[job.key] = _outcome(result)
    return len(pending), hits


def compile_outcomes(jobs: list[CompileJob], workers: int | None = None) -> list[CompileOutcome]:
    """Cross-compile `jobs` (cached per process, like the lint's) and return their outcomes
    in order: for checks of one launch outside a table."""
    compile_all(jobs, workers or default_jobs(), None)
    return [OUTCOMES[job.key] for job in jobs]


# ------------------------------------------------------------------- worker side

def compile_one(job: dict, ptx_dir: str | None) -> dict:
    """Worker side: compile one job to PTX and extract its MMA instructions."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    started = time.perf_counter()
    try:
        fn = getattr(importlib.import_module(job["module"]), job["attr"])
        if not isinstance(fn, JITFunction):
            raise RuntimeError(
                f"{job['module']}.{job['attr']} is a {type(fn).__name__}, not a JITFunction: "
                "the kernel was imported under Triton's interpreter (TRITON_INTERPRET set), "
                "so it cannot be compiled")
        names = list(fn.arg_names)
        given = job["signature"]
        if set(given) != set(names):
            raise RuntimeError(
                f"launch arguments do not match {job['attr']}'s parameters: missing "
                f"{sorted(set(names) - set(given))}, unknown {sorted(set(given) - set(names))}")
        for param in fn.params:
            if param.is_constexpr and param.name not in job["constexprs"]:
                raise RuntimeError(f"tl.constexpr parameter {param.name} has no value")
        runtime = [p.name for p in fn.params if not p.is_constexpr]
        if job.get("positional") and job["positional"] != runtime:
            raise RuntimeError(
                f"launch passes {job['attr']}'s runtime arguments in the order "
                f"{job['positional']}, but its parameters are {runtime}")
        signature = {name: given[name] for name in names}
        attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in job["divisible"]}
        source = ASTSource
        if type(fn).__name__ == "GluonJITFunction":  # the warp-specialised kernel (Gluon)
            from triton.experimental.gluon._runtime import GluonASTSource as source
        src = source(fn=fn, signature=signature, constexprs=job["constexprs"], attrs=attrs)
        compiled = triton.compile(src, target=GPUTarget("cuda", job["capability"], 32),
                                  options=job["options"])
        ptx = compiled.asm["ptx"]
    except Exception as exc:  # reported per variant, never fatal to the lint
        return dict(ok=False, instructions=[], error=f"{type(exc).__name__}: {exc}"[:4000],
                    seconds=round(time.perf_counter() - started, 3))
    digest = hashlib.sha256(ptx.encode()).hexdigest()
    ptx_path = None
    if ptx_dir:
        ptx_path = str(Path(ptx_dir, f"{job['attr']}-sm_{job['capability']}-{digest[:12]}.ptx"))
        Path(ptx_dir).mkdir(parents=True, exist_ok=True)
        Path(ptx_path).write_text(ptx)
    return dict(ok=True, instructions=[i.to_dict() for i in parse_mma_instructions(ptx)],
                error=None, seconds=round(time.perf_counter() - started, 3),
                ptx_sha256=digest, ptx_path=ptx_path,
                grid_dependency=grid_dependency_order(ptx).to_dict(),
                promotion_groups=promotion_groups(ptx))


def stop_at_ptx() -> bool:
    """Make `triton.compile` stop at PTX in this (worker) process: the lint reads PTX only,
    and ptxas (the cubin stage) is ~40% of each compile. ptxas is then not run, so a listing
    it would reject is not reported here (a GPU run reports it). The shortened pipeline
    caches an empty cubin under the same key a real launch would use, so its cache lives in
    a subdirectory of Triton's, which launches never read. Returns False (full compiles)
    where this Triton has no stage hook."""
    from det_suite.platform import triton_compat

    try:
        from triton import knobs

        knobs.runtime.add_stages_inspection_hook  # noqa: B018 - present since Triton 3.4
        cache_dir = knobs.cache.dir
    except (ImportError, AttributeError):
        return False
    protocol = triton_compat.stage_hook_protocol(triton_compat.installed_version())
    knobs.cache.dir = str(Path(cache_dir, PTX_CACHE_SUBDIR))  # also sets TRITON_CACHE_DIR
    knobs.runtime.add_stages_inspection_hook = triton_compat.ptx_only_stage_hook(protocol)
    return True


def worker_main(argv: list[str]) -> int:
    """`python -m det_suite.lint --compile-worker JOBS.json OUT.json [PTX_DIR]`. Started by
    `compile_all` in an environment without the interpreter switch (`worker_env`); a
    kernel imported under the interpreter anyway is reported per job, not compiled."""
    stop_at_ptx()
    jobs_path, out_path = argv[0], argv[1]
    ptx_dir = argv[2] if len(argv) > 2 else None
    jobs = json.loads(Path(jobs_path).read_text())
    results = [compile_one(job, ptx_dir) for job in jobs]
    Path(out_path).write_text(json.dumps(results))
    return 0
