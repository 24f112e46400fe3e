"""Lint tile tables: every tile M may select must compile to ONE MMA instruction along K.

The invariance rule (design.md) lets BLOCK_M follow M only among tiles that use the same
MMA instruction along K. This module checks that necessary condition without a GPU: it
cross-compiles, with Triton, every kernel variant a tile table can select to PTX for the
table's GPU family and compares the tensor-core instructions (`det_suite.ptx_instructions`)
that come out. Within one (target, table entry) every variant must share one instruction
family (mma.sync / wgmma / tcgen05), one K step and one operand type (native e4m3 vs FP8
converted to f16).

What is launched is not restated here: `det_suite.ops.gemm_launch_spec` describes every
launch `ops.launch_fp8_gemm` makes (kernel, runtime arguments in parameter order,
constexprs, options) and the lint binds that same description to stand-in tensors.

What is compiled, per table entry and target (one "variant" = one PTX listing):

- every m_tile of the entry (`TableEntry.variants()`: its BLOCK_M, BLOCK_N, warps, stages,
  loads, workspace and fix-up), at the table's pipeline depth and at every depth in `override_stages`
  (default 2 and 3: `fp8_linear(num_stages=...)` overrides the table's depth for every M);
- the launch shape the tile selects: single pass (`fp8_scaled_mm*` with
  WRITE_PARTIALS=False), or, for a workspace tile (use_workspace and split_k > 1), the
  partial-writing launch with the fused fix-up (FUSED_FIXUP: the last program of a tile
  sums the partials) or followed by `fp8_splitk_reduce_kernel` (fused_fixup false). A
  workspace tile is also compiled single-pass, since all shapes promise the same
  arithmetic; the reduce kernel must hold no MMA;
- the loads the tile selects, decided by `ops.selects_tma` on the stand-in operands: a
  use_tma tile runs `fp8_scaled_mm_tma_kernel` (TMA descriptors with block shapes
  [BLOCK_M, BLOCK_K] and [BLOCK_N, BLOCK_K]; `fp8_scaled_mm_swap_ab_kernel` for a swap_ab
  tile, the weight on the MMA's row side) on operands `ops.tma_compatible` accepts and
  the pointer kernel on others (a swap_ab tile with `SWAP_FALLBACK_BLOCK_M` rows), so both
  are compiled: for an (N, K) entry the pointer
  fallback on an activation whose base is not 16-byte aligned, for the default entry at
  its K % 16 != 0 case; other tiles run the pointer kernel;
- for the family default entry (K unknown): K with EVEN_K True, a K tail (EVEN_K False)
  and a K that is not a multiple of 16 (no divisibility hint on K and the row strides;
  TMA is not possible there); for an (N, K) entry only the K it names;
- arguments specialised the way the Triton runtime specialises them (ints equal to 1
  become constants, 16-divisible values get a divisibility hint), for a representative M
  of each tile (its upper bound, or 4096 when unbounded) plus M = 1 for the tile M = 1
  selects: a decode call makes Triton specialise M to the constant 1, a separate kernel;
- activations contiguous, weight an [N, K] tensor seen as its (K, N) view (SGLang's
  `w.t()` is the same view), output bf16, HAS_BIAS False. Bias is added in the epilogue
  after the K reduction and cannot change the dot's lowering; the output dtype only
  changes the final cast. (An N-contiguous weight was checked by hand on
  sm_89/90/100/120 and gives the same MMA.)

Targets: each family is linted on every compute capability `arch.family_of_capability`
routes to it (sm89: sm_89; sm90: sm_90; sm100: sm_100, sm_103; sm120: sm_120, sm_121).
The "default" table serves any GPU without a family table (and any GPU under
DET_SUITE_ARCH=default), so it is linted on sm_80 (stands for pre-FP8 GPUs: Triton cannot
compile e4m3 there, reported as "unsupported") and on every FP8 target (sm_89, sm_90,
sm_100, sm_120). An explicit `arches` list replaces the targets of every table linted.
"Unsupported" (the target lacks the operand type) is a reported, passing status only on a
target the table is not shipped for; on its own family's targets it is a violation, as is
any other compile failure anywhere.

Also listed, per target: `fp8_splitk_reduce_kernel` (ordered fp32 sum of partials) and
`fp8_quantize_kernel` (elementwise), after checking their PTX holds no MMA at all.

Compilation runs in worker subprocesses whose environment has TRITON_INTERPRET removed:
under the interpreter `triton.jit` returns InterpretedFunction objects, which cannot be
compiled, and CPU CI runs the test-suite with TRITON_INTERPRET=1. The parent process never
compiles, so the lint works identically with or without the variable set. A worker also
checks each launch's positional argument order against the kernel's parameters, and
stops Triton's pipeline at PTX (no ptxas; see `_stop_at_ptx`). Results are cached per
(kernel, signature, constants, options, target) for the life of the process, and on disk
by Triton (in the `det-suite-policy-lint-ptx` subdirectory of its cache directory), which
makes repeated runs take seconds.

Adding a GEMM kernel: launch it from `ops.gemm_launch_spec`, name it in ops'
`GEMM_LAUNCH_KERNELS` / `_LAUNCH_KERNEL`, and say what it must compile to in `KERNEL_INFO`
(here); tests/unit/test_policy_lint.py fails until all three agree. A kernel outside the GEMM launch is
a `FixedKernelSpec` in `FIXED_KERNELS`.
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
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from det_suite.ptx_instructions import MmaInstruction, parse_mma_instructions, summarize
from det_suite.ptx_grid_dependency import GridDependencyOrder, grid_dependency_order

if TYPE_CHECKING:  # keep the worker's import light: no torch, no policy
    from det_suite.ops import GemmLaunchSpec, KernelCall
    from det_suite.policy import LaunchConfig, TableEntry, TilePolicy

INTERPRET_ENV = "TRITON_INTERPRET"

# Compute capabilities each family's table is used on (arch.family_of_capability).
FAMILY_TARGETS: dict[str, tuple[int, ...]] = {
    "sm89": (89,),
    "sm90": (90,),
    "sm100": (100, 103),
    "sm120": (120, 121),
}
DEFAULT_TARGETS: tuple[int, ...] = (80, 89, 90, 100, 120)
OVERRIDE_STAGES: tuple[int, ...] = (2, 3)

# Representative shapes for a family default entry (N, K unknown) and the fixed kernels.
REPRESENTATIVE_N = 4096
REPRESENTATIVE_K = 4096
UNBOUNDED_M = 4096
# Added to a whole number of BLOCK_K tiles for the default entry's misaligned K.
MISALIGNED_K_OFFSET = 8

# A compile error with this text means the target lacks the operand type altogether
# (e.g. fp8e4nv before sm_89): the kernel cannot run there, so there is nothing to lint.
_UNSUPPORTED_RE = re.compile(r"not supported in this architecture")

ROLE_PRIMARY = "primary"
ROLE_ALSO = "also served"
ROLE_FALLBACK = "fallback"
ROLE_CANDIDATE = "candidate"
# Roles where "the kernel does not compile here" is itself a violation: the target is a GPU
# the family's table is shipped for. Elsewhere it is reported as "unsupported".
OWN_ROLES = (ROLE_PRIMARY, ROLE_ALSO)

# How a variant relates to the tile's own launch.
LAUNCH_SELECTED = "selected"              # what the op launches for this tile
LAUNCH_POINTER_FALLBACK = "pointer fallback"  # use_tma tile, operands not TMA-compatible
LAUNCH_SINGLE_PASS = "single-pass check"  # workspace tile compiled without the workspace


# ------------------------------------------------------------------- targets

def parse_arch(text: str | int) -> int:
    """'sm_90', 'sm90', 'sm_90a', '90', '9.0' or 90 -> 90."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        raw = str(text).strip().lower()
        match = re.fullmatch(r"(?:sm_?)?(\d+)a?", raw)
        dotted = re.fullmatch(r"(\d+)\.(\d)", raw)
        if match:
            value = int(match.group(1))
        elif dotted:
            value = int(dotted.group(1)) * 10 + int(dotted.group(2))
        else:
            raise ValueError(f"arch {text!r} is not a CUDA target; expected e.g. sm_90, sm90 or 90")
    if value < 70:
        raise ValueError(f"arch {text!r}: tensor-core targets start at sm_70")
    return value


def arch_label(capability: int) -> str:
    return f"sm_{capability}"


def family_targets(family: str) -> tuple[tuple[int, str], ...]:
    """(capability, role) pairs a shipped family's table is linted on."""
    if family in FAMILY_TARGETS:
        caps = FAMILY_TARGETS[family]
        return tuple((cap, ROLE_PRIMARY if i == 0 else ROLE_ALSO) for i, cap in enumerate(caps))
    return tuple((cap, ROLE_FALLBACK) for cap in DEFAULT_TARGETS)


def _explicit_targets(family: str, arches: Iterable[int]) -> tuple[tuple[int, str], ...]:
    own = dict(family_targets(family)) if family in FAMILY_TARGETS else {}
    return tuple((cap, own.get(cap, ROLE_CANDIDATE)) for cap in arches)


# ------------------------------------------------------------------- launches

@dataclass(frozen=True)
class StandInTensor:
    """What argument specialisation and `ops.tma_compatible` look at in a tensor: dtype,
    shape, strides and an address (16-byte aligned unless told otherwise)."""

    dtype: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    address: int = 1 << 20

    def data_ptr(self) -> int:
        return self.address

    def stride(self, dim: int | None = None):
        return self.strides if dim is None else self.strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    def t(self) -> "StandInTensor":
        return replace(self, shape=self.shape[::-1], strides=self.strides[::-1])


def _contiguous(dtype, *shape: int) -> StandInTensor:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return StandInTensor(dtype, tuple(shape), tuple(reversed(strides)))


# Bytes a stand-in activation's base is moved off 16-byte alignment for a pointer fallback.
MISALIGNED_BASE_OFFSET = 8


def gemm_operands(m: int, n: int, k: int, *, aligned: bool = True
                  ) -> tuple[StandInTensor, StandInTensor]:
    """a (M, K) contiguous and b_kn, the (K, N) view of an [N, K] weight (fp8_linear's).
    aligned=False moves a's base off 16-byte alignment (e.g. an offset view passed to
    `fp8_scaled_mm`): operands TMA cannot take, whatever K is."""
    import torch

    fp8 = torch.float8_e4m3fn
    a = _contiguous(fp8, m, k)
    if not aligned:
        a = replace(a, address=a.address + MISALIGNED_BASE_OFFSET)
    return a, _contiguous(fp8, n, k).t()


def gemm_tensors(spec: "GemmLaunchSpec", a: StandInTensor, b_kn: StandInTensor
                 ) -> dict[str, StandInTensor]:
    """Stand-ins for every tensor role a `GemmLaunchSpec` may name (ops.launch_fp8_gemm's
    tensors): the operands, bf16 output, fp32 scales, fp32 partials, int32 counters; no
    bias."""
    import torch

    m, n = a.shape[0], b_kn.shape[1]
    scale = _contiguous(torch.float32, 1)
    tensors = dict(a=a, b_kn=b_kn, b_nk=b_kn.t(), out=_contiguous(torch.bfloat16, m, n),
                   a_scale=scale, b_scale=scale)
    if spec.workspace_shape is not None:
        tensors["partials"] = _contiguous(torch.float32, *spec.workspace_shape)
    if spec.counter_tiles:  # ops keeps one buffer of at least 1024 counters
        tensors["counters"] = _contiguous(torch.int32, max(spec.counter_tiles, 1024))
    return tensors


@dataclass(frozen=True)
class GemmCase:
    """One launch of a policy-driven kernel: a launch config and the shape it serves."""

    config: "LaunchConfig"
    m: int
    n: int
    k: int

    @property
    def even_k(self) -> bool:
        return self.k % self.config.block_k == 0


@dataclass
class KernelLaunch:
    """A kernel launch as the op performs it: runtime args in positional order (stand-ins
    for tensors, by parameter name), tl.constexpr args, and compile options."""

    args: dict[str, Any]
    constexprs: dict[str, Any]
    options: dict[str, Any]


def bind_call(call: "KernelCall", tensors) -> KernelLaunch:
    """A `KernelCall` of `ops.gemm_launch_spec` bound to (stand-in) tensors."""
    values = call.bind(tensors)
    return KernelLaunch(dict(zip((name for name, _arg in call.args), values)),
                        dict(call.constexprs), dict(call.options))


@dataclass(frozen=True)
class GemmLaunch:
    """One way the op may launch the GEMM for a case, and its kernel calls."""

    case: GemmCase             # config as launched (use_workspace cleared for a single-pass check)
    use_tma: bool              # the TMA kernel (else the pointer kernel)
    launch: str                # LAUNCH_SELECTED | LAUNCH_POINTER_FALLBACK | LAUNCH_SINGLE_PASS
    calls: tuple[tuple["KernelCall", KernelLaunch], ...]

    @property
    def fixup(self) -> str:
        """How split-K partials are summed: 'fused', 'reduce' or '' (no workspace)."""
        cfg = self.case.config
        if not cfg.use_workspace:
            return ""
        return "fused" if cfg.fused_fixup else "reduce"


def gemm_launches(case: GemmCase, *, pointer_fallback: bool = True) -> list[GemmLaunch]:
    """Every launch the op may make for `case`: the tile's own launch; for a use_tma tile
    whose operands TMA can take, also the pointer kernel on operands it cannot take
    (`pointer_fallback`); for a workspace tile, each of those single-pass as well."""
    from det_suite.ops import gemm_launch_spec, selects_tma, tma_compatible

    cfg, m, n, k = case.config, case.m, case.n, case.k
    operands = [(gemm_operands(m, n, k), LAUNCH_SELECTED)]
    if pointer_fallback and cfg.use_tma and tma_compatible(*operands[0][0]):
        operands.append((gemm_operands(m, n, k, aligned=False), LAUNCH_POINTER_FALLBACK))
    shapes = [(cfg, None)]
    if cfg.use_workspace:
        shapes.append((replace(cfg, use_workspace=False), LAUNCH_SINGLE_PASS))
    out = []
    for config, shape_role in shapes:
        for (a, b_kn), load_role in operands:
            use_tma = selects_tma(config, a, b_kn)  # as ops.launch_fp8_gemm decides
            spec = gemm_launch_spec(config, m, n, k, has_bias=False, use_tma=use_tma)
            tensors = gemm_tensors(spec, a, b_kn)
            calls = tuple((call, bind_call(call, tensors)) for call in spec.calls)
            out.append(GemmLaunch(replace(case, config=config), use_tma,
                                  shape_role or load_role, calls))
    return out


@dataclass(frozen=True)
class KernelInfo:
    """What the lint expects of a kernel `ops.gemm_launch_spec` names."""

    operand_dtype: str | None    # the operand format the kernel feeds tl.dot; None: no MMA
    note: str = ""               # what a no-MMA kernel computes instead


KERNEL_INFO: dict[str, KernelInfo] = {
    "fp8_scaled_mm_kernel": KernelInfo("e4m3"),
    "fp8_scaled_mm_tma_kernel": KernelInfo("e4m3"),
    "fp8_scaled_mm_swap_ab_kernel": KernelInfo("e4m3"),
    "fp8_splitk_reduce_kernel": KernelInfo(None, "no MMA (ordered fp32 sum)"),
}


@dataclass(frozen=True)
class FixedKernelSpec:
    name: str
    module: str
    attr: str
    note: str                                   # what the kernel computes instead of an MMA
    launch: Callable[[], KernelLaunch]


def _quantize_launch() -> KernelLaunch:
    """Mirror of `ops._launch_quantize` (kept in step by tests/unit/test_policy_lint.py)."""
    import torch

    from det_suite.kernels.fp8_constants import FP8_E4M3_MAX
    from det_suite.ops import _QUANT_BLOCK_K, _QUANT_BLOCK_M

    m, k = UNBOUNDED_M, REPRESENTATIVE_K
    args = dict(x_ptr=_contiguous(torch.bfloat16, m, k),
                q_ptr=_contiguous(torch.float8_e4m3fn, m, k),
                scale_ptr=_contiguous(torch.float32, 1), M=m, K=k,
                stride_xm=k, stride_xk=1, stride_qm=k, stride_qk=1)
    constexprs = dict(FP8_MAX=FP8_E4M3_MAX, BLOCK_M=_QUANT_BLOCK_M, BLOCK_K=_QUANT_BLOCK_K)
    return KernelLaunch(args, constexprs, {})  # ops launches it with Triton's defaults


REDUCE_CONFIG = dict(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=3,
                     split_k=2, group_m=8, use_workspace=True, fused_fixup=False)


def _reduce_launch() -> KernelLaunch:
    """The split-K reduce as `ops.gemm_launch_spec` launches it at a representative shape."""
    from det_suite.policy import LaunchConfig

    m, n, k = UNBOUNDED_M, REPRESENTATIVE_N, REPRESENTATIVE_K
    launch = gemm_launches(GemmCase(LaunchConfig(**REDUCE_CONFIG), m, n, k))[0]
    (bound,) = [b for call, b in launch.calls if call.kernel == "fp8_splitk_reduce_kernel"]
    return bound


FIXED_KERNELS: tuple[FixedKernelSpec, ...] = (
    FixedKernelSpec(
        name="fp8_splitk_reduce_kernel",
        module="det_suite.kernels.fp8_splitk_reduce", attr="fp8_splitk_reduce_kernel",
        note=KERNEL_INFO["fp8_splitk_reduce_kernel"].note, launch=_reduce_launch,
    ),
    FixedKernelSpec(
        name="fp8_quantize_kernel",
        module="det_suite.kernels.fp8_quantize", attr="fp8_quantize_kernel",
        note="no MMA (elementwise)", launch=_quantize_launch,
    ),
)


# ------------------------------------------------------------------- compile jobs

@dataclass(frozen=True)
class CompileJob:
    """Everything `triton.compile` needs, in plain data (sent to a worker process)."""

    module: str
    attr: str
    capability: int
    signature: tuple[tuple[str, str], ...]   # parameter -> Triton type or "constexpr"
    constexprs: tuple[tuple[str, Any], ...]
    divisible: tuple[str, ...]               # parameters with a divisibility-by-16 hint
    options: tuple[tuple[str, Any], ...]
    positional: tuple[str, ...] = ()         # runtime parameters in the launch's order

    def to_json(self) -> dict:
        return dict(module=self.module, attr=self.attr, capability=self.capability,
                    signature=dict(self.signature), constexprs=dict(self.constexprs),
                    divisible=list(self.divisible), options=dict(self.options),
                    positional=list(self.positional))

    @property
    def key(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


@lru_cache(maxsize=None)
def _backend_class(capability: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    return type(make_backend(GPUTarget("cuda", capability, 32)))


@lru_cache(maxsize=None)
def _kernel_object(module: str, attr: str):
    """The JIT function, for its specialisation flags; None where it cannot be imported
    here (the compile worker then reports the import error itself)."""
    import importlib

    try:
        return getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None


def specialize(launch: KernelLaunch, module: str, attr: str, capability: int) -> CompileJob:
    """Turn a launch into a compile job, specialising runtime arguments exactly as the
    Triton runtime does at launch (its native specialiser, the target's backend)."""
    try:
        from triton._C.libtriton import native_specialize_impl
    except ImportError as exc:  # pragma: no cover - a Triton without it
        raise RuntimeError("this Triton has no native_specialize_impl; policy_lint needs "
                           "Triton 3.3+ to mirror launch-time specialisation") from exc

    backend = _backend_class(capability)
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    divisible: list[str] = []
    # Parameters the kernel declares do_not_specialize(_on_alignment) are never specialised
    # by the runtime (e.g. M of the swapped kernel: M == 1 runs the general code).
    params = {p.name: p for p in getattr(_kernel_object(module, attr), "params", ())}
    for name, value in launch.args.items():
        param = params.get(name)
        kind, spec = native_specialize_impl(
            backend, value, False, not getattr(param, "do_not_specialize", False),
            not getattr(param, "do_not_specialize_on_alignment", False))
        if kind == "constexpr":
            signature[name] = "constexpr"
            constexprs[name] = spec
        else:
            signature[name] = kind
            if isinstance(spec, str) and "D" in spec:
                divisible.append(name)
    for name, value in launch.constexprs.items():
        signature[name] = "constexpr"
        constexprs[name] = value
    # Canonical order (the worker orders parameters by the kernel's own signature), so
    # equal launches give equal jobs and cache keys.
    return CompileJob(module=module, attr=attr, capability=capability,
                      signature=tuple(sorted(signature.items())),
                      constexprs=tuple(sorted(constexprs.items())),
                      divisible=tuple(sorted(divisible)),
                      options=tuple(sorted(launch.options.items())),
                      positional=tuple(launch.args))


@dataclass
class CompileOutcome:
    ok: bool
    instructions: list[MmaInstruction]
    error: str | None = None
    seconds: float = 0.0
    ptx_sha256: str | None = None
    ptx_path: str | None = None
    grid_dependency: dict | None = None  # ptx_grid_dependency.GridDependencyOrder, as data

    @property
    def unsupported(self) -> bool:
        return not self.ok and bool(self.error and _UNSUPPORTED_RE.search(self.error))


# Per-process cache: job key -> outcome. Entries of different tables often share variants.
_CACHE: dict[str, CompileOutcome] = {}


def clear_cache() -> None:
    _CACHE.clear()


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(INTERPRET_ENV, None)
    package_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def default_jobs() -> int:
    """Worker processes: the CPUs this process may use, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def _compile_all(jobs: list[CompileJob], workers: int, ptx_dir: str | None) -> tuple[int, int]:
    """Compile every job not yet cached; returns (compiled, cache hits)."""
    unique: dict[str, CompileJob] = {}
    for job in jobs:
        unique.setdefault(job.key, job)
    pending = [job for key, job in unique.items() if key not in _CACHE]
    hits = len(unique) - len(pending)
    if not pending:
        return 0, hits
    workers = max(1, min(workers, len(pending)))
    chunks = [pending[i::workers] for i in range(workers)]
    with tempfile.TemporaryDirectory(prefix="det-suite-lint-") as tmp:
        procs = []
        for i, chunk in enumerate(chunks):
            jobs_path = Path(tmp, f"jobs{i}.json")
            out_path = Path(tmp, f"out{i}.json")
            log_path = Path(tmp, f"log{i}.txt")
            jobs_path.write_text(json.dumps([job.to_json() for job in chunk]))
            cmd = [sys.executable, "-m", "det_suite.policy_lint", "--compile-worker",
                   str(jobs_path), str(out_path)]
            if ptx_dir:
                cmd.append(str(ptx_dir))
            log = open(log_path, "w")
            procs.append((chunk, out_path, log_path, log,
                          subprocess.Popen(cmd, env=_worker_env(), stdout=log,
                                           stderr=subprocess.STDOUT)))
        for chunk, out_path, log_path, log, proc in procs:
            proc.wait()
            log.close()
            results = json.loads(out_path.read_text()) if out_path.exists() else None
            if results is None or len(results) != len(chunk):
                tail = log_path.read_text()[-2000:]
                for job in chunk:
                    _CACHE[job.key] = CompileOutcome(
                        ok=False, instructions=[],
                        error=f"compile worker exited with {proc.returncode}: {tail}")
                continue
            for job, result in zip(chunk, results):
                _CACHE[job.key] = CompileOutcome(
                    ok=result["ok"],
                    instructions=[MmaInstruction(**{k: v for k, v in rec.items()
                                                    if k in _MMA_FIELDS})
                                  for rec in result["instructions"]],
                    error=result.get("error"), seconds=result.get("seconds", 0.0),
                    ptx_sha256=result.get("ptx_sha256"), ptx_path=result.get("ptx_path"),
                    grid_dependency=result.get("grid_dependency"))
    return len(pending), hits


_MMA_FIELDS = set(MmaInstruction.__dataclass_fields__)


def compile_outcomes(jobs: list[CompileJob], workers: int | None = None) -> list[CompileOutcome]:
    """Cross-compile `jobs` (cached per process, like the lint's) and return their outcomes
    in order: for checks of one launch outside a table."""
    _compile_all(jobs, workers or default_jobs(), None)
    return [_CACHE[job.key] for job in jobs]


def _compile_one(job: dict, ptx_dir: str | None) -> dict:
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
                f"the kernel was imported with {INTERPRET_ENV} set, so it cannot be compiled")
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
        src = ASTSource(fn=fn, signature=signature, constexprs=job["constexprs"], attrs=attrs)
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
                grid_dependency=grid_dependency_order(ptx).to_dict())


# Subdirectory of Triton's cache directory for the lint's PTX-only compiles.
PTX_CACHE_SUBDIR = "det-suite-policy-lint-ptx"


def _stop_at_ptx() -> bool:
    """Make `triton.compile` stop at PTX in this (worker) process: the lint reads PTX only,
    and ptxas (the cubin stage) is ~40% of each compile. ptxas is then not run, so a listing
    it would reject is not reported here (a GPU run reports it). The shortened pipeline
    caches an empty cubin under the same key a real launch would use, so its cache lives in
    a subdirectory of Triton's, which launches never read. Returns False (full compiles)
    where this Triton has no stage hook."""
    try:
        from triton import knobs

        knobs.runtime.add_stages_inspection_hook  # noqa: B018 - present since Triton 3.4
        cache_dir = knobs.cache.dir
    except (ImportError, AttributeError):
        return False

    def drop_cubin(*args):
        stages = next(a for a in args if isinstance(a, dict))
        if "ptx" in stages and "cubin" in stages:
            stages["cubin"] = lambda module, metadata: b""

    os.environ["TRITON_CACHE_DIR"] = str(Path(cache_dir, PTX_CACHE_SUBDIR))
    knobs.runtime.add_stages_inspection_hook = drop_cubin
    return True


def _worker_main(argv: list[str]) -> int:
    os.environ.pop(INTERPRET_ENV, None)  # before any kernel module is imported
    _stop_at_ptx()
    jobs_path, out_path = argv[0], argv[1]
    ptx_dir = argv[2] if len(argv) > 2 else None
    jobs = json.loads(Path(jobs_path).read_text())
    results = [_compile_one(job, ptx_dir) for job in jobs]
    Path(out_path).write_text(json.dumps(results))
    return 0


# ------------------------------------------------------------------- results

@dataclass
class VariantResult:
    kernel: str
    tile: int                 # index of the entry's m_tile
    m_range: str              # rows that select this tile
    m: int                    # M the variant was specialised for (1: decode constant)
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    stages_source: str        # "table" or "override"
    split_k: int
    group_m: int
    write_partials: bool
    even_k: bool
    k: int                    # K the variant was specialised for
    tma: bool                 # TMA descriptor loads (fp8_scaled_mm_tma_kernel)
    fixup: str                # split-K partials summed: "fused" | "reduce" | "" (no workspace)
    launch: str               # selected | pointer fallback | single-pass check
    expects_mma: bool         # False: a kernel that must hold no MMA (the split-K reduce)
    status: str               # ok | no-mma | error | unsupported | unexpected-mma
    summary: str              # instruction summary or the error's last line
    instructions: list[dict] = field(default_factory=list)
    error: str | None = None
    ptx_sha256: str | None = None
    pdl: bool = False         # launched with programmatic dependent launch
    pdl_order: str = ""       # where a PDL variant waits for the previous grid (PTX)
    label: str = ""

    def __post_init__(self):
        self.label = self.describe()

    def describe(self) -> str:
        parts = [f"BLOCK_M {self.block_m}", f"w{self.num_warps}", f"s{self.num_stages}",
                 "EVEN_K" if self.even_k else "K-tail"]
        if self.k % 16:
            parts.append(f"K%16={self.k % 16}")
        if self.tma:
            parts.append("TMA")
        if self.write_partials:
            parts.append(f"partials+{self.fixup}")
        if self.pdl:
            parts.append("PDL")
        if self.launch != LAUNCH_SELECTED:
            parts.append(f"({self.launch})")
        if self.m == 1:
            parts.append("M=1")
        if not self.expects_mma:
            parts.insert(0, f"{self.kernel} after")
        return " ".join(parts)

    def signatures(self) -> set[tuple]:
        return {tuple(i["signature"]) for i in self.instructions}


@dataclass
class EntryResult:
    key: str
    status: str               # ok | violation | unsupported
    instruction: str          # the one instruction, or a description of the mix
    message: str | None
    variants: list[VariantResult]


@dataclass
class TableResult:
    family: str
    source: str
    capability: int
    arch: str
    role: str
    expected_mma: str
    expected_match: bool | None
    entries: list[EntryResult]


@dataclass
class FixedKernelResult:
    kernel: str
    capability: int
    arch: str
    status: str               # ok | violation | unsupported | error
    summary: str
    error: str | None = None


@dataclass
class LintResult:
    triton_version: str
    override_stages: list[int]
    tables: list[TableResult]
    fixed_kernels: list[FixedKernelResult]
    violations: list[str]
    warnings: list[str]
    compiled: int = 0
    cache_hits: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict:
        data = asdict(self)
        data["ok"] = self.ok
        data["schema"] = "det-suite/policy-lint/2"
        return data

    def to_markdown(self) -> str:
        return render_markdown(self.to_dict())

    def to_text(self, verbose: bool = False) -> str:
        return render_text(self.to_dict(), verbose=verbose)


# ------------------------------------------------------------------- the lint

def _m_ranges(entry: "TableEntry") -> list[tuple[int, int | None]]:
    ranges, low = [], 1
    for tile in entry.m_tiles:
        ranges.append((low, tile.max_m))
        if tile.max_m is not None:
            low = tile.max_m + 1
    return ranges


def _range_text(low: int, high: int | None) -> str:
    if high is None:
        return f">={low}"
    return str(low) if high == low else f"{low}-{high}"


def _cases(entry: "TableEntry", override_stages: Iterable[int]):
    """(tile index, m range, stages source, GemmCase) for every variant to compile."""
    if entry.k is None:
        n = REPRESENTATIVE_N
        whole = REPRESENTATIVE_K - REPRESENTATIVE_K % entry.block_k
        ks = [whole,                               # EVEN_K True
              whole + entry.block_k // 2,          # K tail, K % 16 == 0
              whole + MISALIGNED_K_OFFSET]         # K tail, K % 16 != 0: no TMA, no hints
    else:
        n, ks = entry.n, [entry.k]
    for index, (config, (low, high)) in enumerate(zip(entry.variants(), _m_ranges(entry))):
        if high is not None and high < low:
            continue  # unreachable tile: no M selects it
        ms = []
        if low == 1:
            ms.append(1)  # decode: Triton specialises M == 1 to a constant
        general = high if high is not None else max(UNBOUNDED_M, low)
        if general != 1:
            ms.append(general)
        stages = {config.num_stages: "table"}
        for s in override_stages:
            stages.setdefault(s, "override")
        for num_stages, source in sorted(stages.items()):
            staged = replace(config, num_stages=num_stages)
            for k in ks:
                for m in ms:
                    yield index, _range_text(low, high), source, GemmCase(staged, m, n, k)


def _condense_error(error: str) -> str:
    """One line for a compile error: the Python exception Triton wraps, or ptxas's fatal."""
    wrapped = re.findall(r'\b(\w+(?:Error|Exception))\("(.+?)"\)', error)
    if wrapped:
        return wrapped[-1][1].split(". ")[0][:200]
    lines = [" ".join(line.split()) for line in error.splitlines() if line.strip()]
    fatal = [line for line in lines if "fatal" in line]
    if fatal:
        return fatal[-1][:200]
    return (lines[0] if lines else "compile failed")[:200]


def _variant_status(outcome: CompileOutcome) -> tuple[str, str]:
    if not outcome.ok:
        if outcome.unsupported:
            return "unsupported", _condense_error(outcome.error or "")
        return "error", _condense_error(outcome.error or "")
    if not outcome.instructions:
        return "no-mma", "no MMA"
    return "ok", summarize(outcome.instructions)


_DISTINGUISHERS = (
    ("BLOCK_M", lambda v: v.block_m),
    ("BLOCK_N", lambda v: v.block_n),
    ("num_warps", lambda v: v.num_warps),
    ("num_stages", lambda v: v.num_stages),
    ("EVEN_K", lambda v: v.even_k),
    ("M", lambda v: v.m),
    ("K", lambda v: v.k),
    ("loads", lambda v: "TMA" if v.tma else "pointer"),
    ("WRITE_PARTIALS", lambda v: v.write_partials),
    ("fix-up", lambda v: v.fixup or "none"),
)


def _describe_groups(groups: dict[str, list[VariantResult]]) -> str:
    """'BLOCK_M 16, 32 (mma.sync m16n8k16 f16) vs BLOCK_M 128 (wgmma m64n64k32 e4m3)'."""
    for name, get in _DISTINGUISHERS:
        value_sets = [{get(v) for v in members} for members in groups.values()]
        disjoint = all(a.isdisjoint(b) for i, a in enumerate(value_sets)
                       for b in value_sets[i + 1:])
        if disjoint:
            return " vs ".join(
                f"{name} {', '.join(str(x) for x in sorted(values))} ({summary})"
                for values, summary in zip(value_sets, groups))
    parts = []
    for summary, members in groups.items():
        parts.append(f"[{_some(sorted({v.label for v in members}))}] ({summary})")
    return " vs ".join(parts)


def _expected_matches(expected: str, summaries: Iterable[str]) -> bool:
    """Every token of the table's `expected_mma` must match a token of the instruction
    summary; an upper-case letter after m/n/k in a shape is a wildcard ('m64nNk32')."""
    patterns = []
    for token in expected.split():
        pattern = re.escape(token)
        pattern = re.sub(r"([mnk])[A-Z]", r"\1\\d+", pattern)
        patterns.append(re.compile(pattern + r"\Z"))
    for summary in summaries:
        tokens = summary.split()
        if not all(any(p.match(t) for t in tokens) for p in patterns):
            return False
    return True


def _entry_calls(entry: "TableEntry", override_stages: tuple[int, ...]):
    """(tile index, m range, stages source, GemmLaunch, KernelCall, KernelLaunch) for every
    kernel call the entry's tiles may make."""
    # The default entry reaches a use_tma tile's pointer kernel through its K % 16 != 0
    # case; an (N, K) entry through operands TMA cannot take.
    fallback = entry.k is not None
    return tuple((index, m_range, source, launch, call, bound)
                 for index, m_range, source, case in _cases(entry, override_stages)
                 for launch in gemm_launches(case, pointer_fallback=fallback)
                 for call, bound in launch.calls)


def _lint_entry(where: str, entry: "TableEntry", capability: int,
                override_stages, outcomes) -> EntryResult:
    variants: list[VariantResult] = []
    unordered_pdl: list[str] = []
    for index, m_range, source, launch, call, bound in _entry_calls(entry, override_stages):
        info = KERNEL_INFO[call.kernel]
        job = specialize(bound, call.module, call.kernel, capability)
        outcome = outcomes[job.key]
        status, summary = _variant_status(outcome)
        if info.operand_dtype is None:  # must hold no MMA
            if status == "no-mma":
                status, summary = "ok", info.note
            elif status == "ok":
                status = "unexpected-mma"
        cfg, case = launch.case.config, launch.case
        pdl = bool(dict(call.options).get("launch_pdl"))
        order = (GridDependencyOrder(**outcome.grid_dependency)
                 if pdl and outcome.grid_dependency else None)
        variants.append(VariantResult(
            kernel=call.kernel, tile=index, m_range=m_range, m=case.m,
            block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, stages_source=source,
            split_k=cfg.split_k, group_m=cfg.group_m,
            write_partials=cfg.use_workspace, even_k=case.even_k, k=case.k,
            tma=launch.use_tma, fixup=launch.fixup, launch=launch.launch,
            expects_mma=info.operand_dtype is not None,
            status=status, summary=summary,
            instructions=[_annotated(i, info.operand_dtype or "") for i in outcome.instructions],
            error=outcome.error, ptx_sha256=outcome.ptx_sha256, pdl=pdl,
            pdl_order=order.describe() if order else ""))
        if order is not None and not order.waits_first:
            unordered_pdl.append(f"{variants[-1].label}: {order.describe()}")

    mma_variants = [v for v in variants if v.expects_mma]
    others = [v for v in variants if not v.expects_mma]
    if {v.status for v in mma_variants} == {"unsupported"}:
        return EntryResult(entry.key, "unsupported",
                           f"kernel does not compile for {arch_label(capability)}: "
                           f"{mma_variants[0].summary}", None, variants)
    problems = []
    failures: dict[str, list[str]] = {}
    for v in variants:
        if v.status in ("error", "unsupported"):
            failures.setdefault(v.summary, []).append(v.label)
    for error, labels in failures.items():
        problems.append(f"{_some(labels)} failed to compile ({len(labels)} of "
                        f"{len(variants)} variants): {error}")
    no_mma = [v.label for v in mma_variants if v.status == "no-mma"]
    if no_mma:
        problems.append(f"{_some(no_mma)}: no MMA instruction in the PTX (tl.dot lowered "
                        "without tensor cores), so the K order cannot be checked")
    if unordered_pdl:
        problems.append(f"{_some(unordered_pdl)}: a PDL launch may overlap the previous "
                        "kernel, so it must wait (griddepcontrol.wait) before any global "
                        "memory access")
    unexpected = [v for v in others if v.status == "unexpected-mma"]
    if unexpected:
        problems.append(f"{_some([v.label for v in unexpected])}: expected "
                        f"{KERNEL_INFO[unexpected[0].kernel].note} but the PTX holds "
                        f"{unexpected[0].summary}")
    groups: dict[str, list[VariantResult]] = {}
    signatures = set()
    for v in mma_variants:
        if v.status == "ok":
            signatures |= v.signatures()
            groups.setdefault(v.summary, []).append(v)
    if len(signatures) > 1:
        # Group by instruction signature (family, K step, operand type) for the message.
        by_sig: dict[frozenset, list[VariantResult]] = {}
        for v in mma_variants:
            if v.status == "ok":
                by_sig.setdefault(frozenset(v.signatures()), []).append(v)
        named = {" + ".join(sorted({_sig_text(s, members[0]) for s in sigs})): members
                 for sigs, members in by_sig.items()}
        problems.insert(0, _describe_groups(named))
    if problems:
        message = f"{where} entry {entry.key}: " + "; ".join(problems)
        mix = " vs ".join(groups) if groups else "no instruction"
        return EntryResult(entry.key, "violation", mix, message, variants)
    return EntryResult(entry.key, "ok", " / ".join(groups), None, variants)


def _some(labels: list[str], shown: int = 3) -> str:
    more = f"; +{len(labels) - shown} more" if len(labels) > shown else ""
    return "; ".join(labels[:shown]) + more


def _sig_text(signature: tuple, variant: VariantResult) -> str:
    """Summary of the instruction with this signature, from the variant's records."""
    for record in variant.instructions:
        if tuple(record["signature"]) == signature:
            return record["summary"]
    return str(signature)


def _annotated(instruction: MmaInstruction, operand_dtype: str) -> dict:
    data = instruction.to_dict()
    operand = instruction.operand_type
    data["converted_from"] = operand_dtype if operand and operand not in (
        operand_dtype, instruction.kind) else None
    return data


def _plan(policies, override_stages, include_fixed):
    """All compile jobs the lint needs, before any compilation."""
    jobs = []
    caps = set()
    for policy, targets in policies:
        for capability, _role in targets:
            caps.add(capability)
            for entry in policy.all_entries():
                for *_where, call, bound in _entry_calls(entry, override_stages):
                    jobs.append(specialize(bound, call.module, call.kernel, capability))
    if include_fixed:
        for capability in sorted(caps):
            for spec in FIXED_KERNELS:
                jobs.append(specialize(spec.launch(), spec.module, spec.attr, capability))
    return jobs, sorted(caps)


def lint(policies: list[tuple["TilePolicy", tuple[tuple[int, str], ...]]], *,
         override_stages: Iterable[int] = OVERRIDE_STAGES, jobs: int | None = None,
         ptx_dir: str | None = None, include_fixed: bool = True) -> LintResult:
    """Lint (policy, ((capability, role), ...)) pairs. Never skips a pair: a target the
    kernel cannot compile for is reported as "unsupported" or as a violation."""
    import triton

    from det_suite.policy import validate_stages

    override_stages = tuple(sorted({validate_stages(s) for s in override_stages}))
    started = time.perf_counter()
    planned, caps = _plan(policies, override_stages, include_fixed)
    compiled, hits = _compile_all(planned, jobs or default_jobs(), ptx_dir)
    outcomes = _CACHE

    tables, violations, warnings = [], [], []
    owned_caps = {cap for _policy, targets in policies for cap, role in targets
                  if role in OWN_ROLES}
    for policy, targets in policies:
        for capability, role in targets:
            arch = arch_label(capability)
            where = f"{arch} ({policy.family} table)"
            entries = [_lint_entry(where, entry, capability, override_stages, outcomes)
                       for entry in policy.all_entries()]
            for entry in entries:
                if entry.message:
                    violations.append(entry.message)
            summaries = [v.summary for e in entries if e.status == "ok" for v in e.variants
                         if v.expects_mma]
            expected_match = None
            if policy.expected_mma and summaries:
                expected_match = _expected_matches(policy.expected_mma, summaries)
                if not expected_match:
                    text = (f"{where}: tiles compile to {' / '.join(sorted(set(summaries)))}, "
                            f"not the table's expected_mma '{policy.expected_mma}'")
                    (violations if role == ROLE_PRIMARY else warnings).append(text)
            for entry in entries:
                if entry.status != "unsupported":
                    continue
                if role in OWN_ROLES:  # the family's own GPU must run its kernel
                    entry.status = "violation"
                    entry.message = (f"{where} entry {entry.key}: the table's own target "
                                     f"cannot compile the kernel: {entry.instruction}")
                    violations.append(entry.message)
                else:
                    warnings.append(f"{where} entry {entry.key}: not checked, "
                                    f"{entry.instruction}")
            tables.append(TableResult(
                family=policy.family, source=policy.source, capability=capability, arch=arch,
                role=role, expected_mma=policy.expected_mma, expected_match=expected_match,
                entries=entries))

    fixed = []
    if include_fixed:
        for capability in caps:
            for spec in FIXED_KERNELS:
                job = specialize(spec.launch(), spec.module, spec.attr, capability)
                outcome = outcomes[job.key]
                status, summary = _variant_status(outcome)
                arch = arch_label(capability)
                if status == "no-mma":
                    status, summary = "ok", spec.note
                elif status == "ok":
                    status = "violation"
                    violations.append(f"{arch} {spec.name}: expected {spec.note} but the PTX "
                                      f"holds {summary}")
                elif status == "error" or (status == "unsupported"
                                           and capability in owned_caps):
                    status = "violation" if status == "unsupported" else status
                    violations.append(f"{arch} {spec.name} failed to compile: {summary}")
                fixed.append(FixedKernelResult(spec.name, capability, arch, status, summary,
                                               outcome.error))

    return LintResult(triton_version=triton.__version__, override_stages=list(override_stages),
                      tables=tables, fixed_kernels=fixed, violations=violations,
                      warnings=warnings, compiled=compiled, cache_hits=hits,
                      seconds=round(time.perf_counter() - started, 2))


def shipped_pairs(families: Iterable[str] | None = None, arches: Iterable | None = None):
    """(policy, targets) pairs for det-suite's shipped tables ("default" included)."""
    from det_suite.platform.family import validate_family
    from det_suite.policy import shipped_families, shipped_policy

    names = list(families) if families else list(shipped_families())
    caps = [parse_arch(a) for a in arches] if arches else None
    return [(shipped_policy(validate_family(name)),
             _explicit_targets(name, caps) if caps else family_targets(name))
            for name in dict.fromkeys(names)]


def table_pair(path_or_policy, arches: Iterable | None = None):
    """(policy, targets) for a candidate table (a JSON path or a TilePolicy); targets
    default to those of the family the table names."""
    from det_suite.policy import TilePolicy, load_policy_file

    policy = path_or_policy if isinstance(path_or_policy, TilePolicy) \
        else load_policy_file(path_or_policy)
    caps = [parse_arch(a) for a in arches] if arches else None
    return (policy, _explicit_targets(policy.family, caps) if caps
            else family_targets(policy.family))


def lint_shipped(families: Iterable[str] | None = None, *, arches: Iterable | None = None,
                 **kwargs) -> LintResult:
    """Lint det-suite's shipped tables (all families, "default" included, by default)."""
    return lint(shipped_pairs(families, arches), **kwargs)


def lint_table(path_or_policy, arches: Iterable | None = None, **kwargs) -> LintResult:
    """Lint a candidate table on `arches` (default: its family's targets)."""
    return lint([table_pair(path_or_policy, arches)], **kwargs)


def instruction_table(families: Iterable[str] | None = None, **kwargs) -> dict:
    """The lint of the shipped tables as plain data, for embedding in other reports.
    `render_markdown(instruction_table())` gives its Markdown form."""
    return lint_shipped(families, **kwargs).to_dict()


# ------------------------------------------------------------------- rendering

def _tile_rows(data: dict) -> list[list[str]]:
    """One row per (target, table, entry, m_tile); sub-variants folded into counts."""
    rows = []
    for table in data["tables"]:
        for entry in table["entries"]:
            tiles: dict[int, list[dict]] = {}
            for v in entry["variants"]:
                tiles.setdefault(v["tile"], []).append(v)
            for index in sorted(tiles):
                vs = tiles[index]
                first = vs[0]
                stages = sorted({(v["num_stages"], v["stages_source"]) for v in vs})
                stage_text = ",".join(f"{s}{'*' if src == 'table' else ''}" for s, src in stages)
                parts = []
                evens = sorted({v["even_k"] for v in vs}, reverse=True)
                parts.append("EVEN_K " + "/".join("T" if e else "F" for e in evens))
                if any(v["k"] % 16 for v in vs):
                    parts.append("K%16!=0")
                ms = sorted({v["m"] for v in vs})
                parts.append("M " + "/".join(str(m) for m in ms))
                loads = [name for name, tma in (("TMA", True), ("pointer", False))
                         if any(v["tma"] == tma for v in vs)]
                if loads != ["pointer"]:
                    parts.append("+".join(loads) + " loads")
                fixups = sorted({v["fixup"] for v in vs if v["write_partials"]})
                if fixups:
                    parts.append("partials+" + "/".join(fixups))
                if any(v["launch"] == LAUNCH_SINGLE_PASS for v in vs):
                    parts.append("single-pass")
                summaries = list(dict.fromkeys(v["summary"] for v in vs if v["expects_mma"]))
                status = entry["status"]
                rows.append([
                    table["arch"], table["family"], table["role"], entry["key"],
                    first["m_range"], str(first["block_m"]), str(first["block_n"]),
                    str(first["num_warps"]),
                    stage_text, f"{len(vs)} ({', '.join(parts)})",
                    " | ".join(summaries), "OK" if status == "ok" else status.upper(),
                ])
    return rows


_TILE_HEADER = ["arch", "table", "role", "entry", "M", "BLOCK_M", "BLOCK_N", "warps", "stages",
                "variants", "instruction", "status"]


def _fixed_rows(data: dict) -> list[list[str]]:
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for f in data["fixed_kernels"]:
        grouped.setdefault((f["kernel"], f["summary"], f["status"]), []).append(f["arch"])
    return [[kernel, ", ".join(arches), summary, "OK" if status == "ok" else status.upper()]
            for (kernel, summary, status), arches in grouped.items()]


_FIXED_HEADER = ["kernel", "arch", "result", "status"]


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    esc = lambda c: str(c).replace("|", "\\|")
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _legend(data: dict) -> str:
    stages = ", ".join(str(s) for s in data["override_stages"]) or "none"
    return (f"Triton {data['triton_version']}, PTX cross-compiled on CPU. Each row is one tile "
            f"M can select; stages marked * are the table's, the others the num_stages "
            f"overrides linted ({stages}); 'variants' counts the PTX listings compiled for the "
            "tile (K-tail, misaligned-K and M=1 specialisations; TMA and pointer loads; "
            "workspace launches with their fix-up, and the single-pass check).")


def render_text(data: dict, verbose: bool = False) -> str:
    parts = [_text_table(_TILE_HEADER, _tile_rows(data))]
    if data["fixed_kernels"]:
        parts.append(_text_table(_FIXED_HEADER, _fixed_rows(data)))
    if verbose:
        rows = [[t["arch"], t["family"], e["key"], v["kernel"], v["label"], v["summary"]]
                for t in data["tables"] for e in t["entries"] for v in e["variants"]]
        parts.append(_text_table(["arch", "table", "entry", "kernel", "variant", "instruction"],
                                 rows))
    parts.append(_legend(data))
    for text in data["warnings"]:
        parts.append(f"warning: {text}")
    for text in data["violations"]:
        parts.append(f"VIOLATION: {text}")
    parts.append(_status_line(data))
    return "\n\n".join(parts)


def _status_line(data: dict) -> str:
    entries = sum(len(t["entries"]) for t in data["tables"])
    variants = sum(len(e["variants"]) for t in data["tables"] for e in t["entries"])
    verdict = "OK" if data["ok"] else f"FAILED ({len(data['violations'])} violation(s))"
    return (f"lint-policy: {len(data['tables'])} table x target pairs, {entries} entries, "
            f"{variants} variants ({data['compiled']} compiled, {data['cache_hits']} cached) in "
            f"{data['seconds']} s: {verdict}")


def render_markdown(data: dict) -> str:
    """Markdown for a lint result dict (`LintResult.to_dict()` / `instruction_table()`)."""
    parts = ["## MMA instruction per tile (policy lint)", _legend(data),
             _md_table(_TILE_HEADER, _tile_rows(data))]
    if data["fixed_kernels"]:
        parts += ["Kernels without a tile table (checked to hold no MMA):",
                  _md_table(_FIXED_HEADER, _fixed_rows(data))]
    if data["violations"]:
        parts.append("Violations:\n\n" + "\n".join(f"- {t}" for t in data["violations"]))
    if data["warnings"]:
        parts.append("Warnings:\n\n" + "\n".join(f"- {t}" for t in data["warnings"]))
    parts.append(_status_line(data))
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--compile-worker":
    sys.exit(_worker_main(sys.argv[2:]))
