"""The FP8 GEMM benchmark on a GPU: det-suite's `fp8_scaled_mm` against every vendor GEMM
available here.

Per (N, K) shape and row count M, one process, the same quantized operands for everyone:
random FP8 activations (M, K) and weight [N, K] (never zeros, so nothing is shortcut and
wrong results cannot hide), static per-tensor scales, BF16 output, no bias (Qwen3's
linears have none).

Each cell:
1. runs `torch._scaled_mm` (the reference), det-suite's public `fp8_scaled_mm` (validated
   path, the policy's choice of LaunchConfig) and every other vendor once, and compares
   each output with the reference (accuracy sanity, not invariance: a wrong kernel must
   never get a time);
2. times det-suite through `launch_fp8_gemm` with that same LaunchConfig and a
   preallocated output, after checking it returns bitwise what the public path returned:
   the numbers are the GPU time of exactly the launches `fp8_scaled_mm` makes, without its
   host-side argument validation (hidden by the timers' padding or a CUDA Graph anyway);
3. records median microseconds per mode, det/torch ratio, and for small M the ratio to the
   weight-bytes floor (reading the FP8 weight once at the measured copy bandwidth).

Errors (a wrong or failing det-suite result, a failing reference) are recorded in the cell
and make the run fail; a wrong or failing optional vendor is recorded as a vendor error
only (it is not det-suite's result).
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:  # torch is imported inside functions: the CLI imports this package to
    import torch  # register its options, and `det-suite --help` must stay fast

from det_suite.bench import MODES
from det_suite.bench.gemm.accuracy import check_accuracy
from det_suite.bench.gemm.fp64_error import measure_fp64_error
from det_suite.bench.gemm.operands import random_fp8, scale_tensor
from det_suite.bench.gemm.render import config_text, fmt
from det_suite.bench.gemm.results import (FLOOR_MAX_M, REFERENCE_VENDOR, BenchRun, CellResult,
                                          weight_floor_us)
from det_suite.bench.gemm.shapes import GemmShape

DEFAULT_MODES = ("warm", "flush")


def measure_cell(shape: GemmShape, m: int, *, det_checked: Callable[[], torch.Tensor],
                 det_timed: Callable[[], torch.Tensor], det_config: dict | None,
                 vendors: dict[str, Callable[[], torch.Tensor]],
                 timers: dict[str, Callable[[Callable[[], Any]], float]],
                 floor_us: float | None) -> dict[str, CellResult]:
    """Check, then time, one (shape, M) cell in every mode of `timers`.

    Device-agnostic: the callables carry the operands. `det_checked` is det-suite's public
    path, `det_timed` the launch the timer repeats (must return the same bits);
    `vendors[REFERENCE_VENDOR]` is the reference every output is compared with.
    """
    import torch

    if REFERENCE_VENDOR not in vendors:
        raise ValueError(f"vendors must include the reference {REFERENCE_VENDOR!r}")
    results = {mode: CellResult(mode, shape, m, config=det_config, floor_us=floor_us)
               for mode in timers}
    errors: list[str] = []
    vendor_errors: dict[str, str] = {}
    det_ok = False
    ok_vendors = []
    accuracy = None
    try:
        ref = vendors[REFERENCE_VENDOR]()
        ok_vendors.append(REFERENCE_VENDOR)
    except Exception as exc:  # noqa: BLE001 - recorded in the report
        ref = None
        errors.append(f"reference {REFERENCE_VENDOR} failed: {type(exc).__name__}: {exc}")
    if ref is not None:
        try:
            det_out = det_checked()
            acc = check_accuracy(det_out, ref)
            accuracy = asdict(acc)
            if not acc.ok:
                errors.append(f"wrong result vs {REFERENCE_VENDOR}: {acc.reason}")
            else:
                timed_out = det_timed()
                if not torch.equal(timed_out, det_out):
                    errors.append("the timed launch does not return the bits the public "
                                  "fp8_scaled_mm returned for the same config")
                else:
                    det_ok = True
        except Exception as exc:  # noqa: BLE001
            errors.append(f"det-suite fp8_scaled_mm failed: {type(exc).__name__}: {exc}")
        for name, fn in vendors.items():
            if name == REFERENCE_VENDOR:
                continue
            try:
                acc = check_accuracy(fn(), ref)
            except Exception as exc:  # noqa: BLE001
                vendor_errors[name] = f"failed: {type(exc).__name__}: {exc}"
                continue
            if acc.ok:
                ok_vendors.append(name)
            else:
                vendor_errors[name] = f"wrong result vs {REFERENCE_VENDOR}: {acc.reason}"
    for mode, timer in timers.items():
        cell = results[mode]
        cell.accuracy = accuracy
        cell.errors = list(errors)
        cell.vendor_errors = dict(vendor_errors)
        if det_ok:
            try:
                cell.det_us = timer(det_timed)
            except Exception as exc:  # noqa: BLE001
                cell.errors.append(f"timing det-suite failed: {type(exc).__name__}: {exc}")
        for name in vendors:
            cell.vendor_us[name] = None
            if name not in ok_vendors:
                continue
            try:
                cell.vendor_us[name] = timer(vendors[name])
            except Exception as exc:  # noqa: BLE001
                message = f"timing failed: {type(exc).__name__}: {exc}"
                if name == REFERENCE_VENDOR:
                    cell.errors.append(f"{REFERENCE_VENDOR} {message}")
                else:
                    cell.vendor_errors[name] = message
    return results


def progress_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_gemm_bench(shapes: Sequence[GemmShape], ms: Sequence[int],
                   modes: Sequence[str] = DEFAULT_MODES, *, policy=None,
                   vendor_names: Sequence[str] | None = None, warmup_ms: float = 25.0,
                   rep_ms: float = 100.0, seed: int = 0, floor_max_m: int = FLOOR_MAX_M,
                   bandwidth: float | None = None,
                   progress: Callable[[str], None] = progress_to_stderr,
                   fp64_error: bool = False) -> BenchRun:
    """The benchmark on the current CUDA device (raises GpuRequired without one)."""
    import torch

    from det_suite.bench.timing import (copy_bandwidth, launch_floor_us, make_timer,
                                        require_gpu)
    from det_suite.ops import fp8_scaled_mm, launch_fp8_gemm
    from det_suite.ops.linear import device_policy
    from det_suite.vendors import available_vendor_gemms

    require_gpu("bench gemm")
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    device = torch.device("cuda", torch.cuda.current_device())
    available = available_vendor_gemms()
    if vendor_names is None:
        vendor_names = list(available)
    missing = [v for v in vendor_names if v not in available]
    if missing:
        raise ValueError(f"vendor(s) {', '.join(missing)} not available here; available: "
                         f"{', '.join(available)}")
    if REFERENCE_VENDOR not in vendor_names:
        vendor_names = [REFERENCE_VENDOR, *vendor_names]
    vendors = {name: available[name] for name in vendor_names}
    if policy is None:
        policy = device_policy(device)
    if bandwidth is None:
        bandwidth = copy_bandwidth()
        progress(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + written)")
    timers = {mode: make_timer(mode, warmup_ms=warmup_ms, rep_ms=rep_ms) for mode in modes}
    run = BenchRun(shapes=list(shapes), ms=list(ms), modes=list(modes),
                   vendors={n: v.description for n, v in vendors.items()},
                   policy_source=policy.source or "(in memory)", policy_family=policy.family,
                   copy_bandwidth=bandwidth,
                   settings={"warmup_ms": warmup_ms, "rep_ms": rep_ms, "seed": seed,
                             "floor_max_m": floor_max_m, "out_dtype": "bfloat16",
                             "bias": False},
                   cells={mode: [] for mode in modes})
    for mode, timer in timers.items():
        run.launch_floor_us[mode] = launch_floor_us(timer)
        progress(f"[{mode}] an empty kernel takes {run.launch_floor_us[mode]:.2f} us per call")
    out_dtype = torch.bfloat16
    gen = torch.Generator(device=device)
    for shape in shapes:
        n, k = shape.n, shape.k
        gen.manual_seed(seed * 1_000_003 + n * 31 + k)
        weight = random_fp8((n, k), generator=gen, device=device)
        w_kn = weight.t()  # (K, N) column-major view: the layout torch._scaled_mm wants
        a_scale = scale_tensor(1.0 / 16, device)
        w_scale = scale_tensor(1.0 / math.sqrt(k), device)
        for m in ms:
            a = random_fp8((m, k), generator=gen, device=device)
            config = policy.select(m, n, k)
            out = torch.empty((m, n), dtype=out_dtype, device=device)

            def det_checked(a=a):
                return fp8_scaled_mm(a, w_kn, a_scale, w_scale, out_dtype=out_dtype,
                                     weight_layout="kn", policy=policy)

            def det_timed(a=a, out=out, config=config):
                return launch_fp8_gemm(a, w_kn, a_scale, w_scale, None, out, config)

            vendor_calls = {name: (lambda fn=v.fn, a=a: fn(a, w_kn, a_scale, w_scale, None,
                                                              out_dtype))
                            for name, v in vendors.items()}
            floor = weight_floor_us(n, k, bandwidth) if m <= floor_max_m else None
            cells = measure_cell(shape, m, det_checked=det_checked, det_timed=det_timed,
                                 det_config=asdict(config), vendors=vendor_calls,
                                 timers=timers, floor_us=floor)
            error = None
            if fp64_error:
                error = measure_fp64_error(
                    m, n, k, generator=gen, device=device, out_dtype=out_dtype,
                    det=lambda a, w, sa, sw: fp8_scaled_mm(a, w, sa, sw, out_dtype=out_dtype,
                                                           weight_layout="kn", policy=policy),
                    reference=lambda a, w, sa, sw: vendors[REFERENCE_VENDOR].fn(
                        a, w, sa, sw, None, out_dtype)).to_json()
            for mode, cell in cells.items():
                cell.fp64_error = error
                run.cells[mode].append(cell)
                status = "WRONG" if cell.errors else f"{fmt(cell.det_us)} us"
                progress(f"[{mode}] {shape.name} {shape.dims} M={m}: det {status}, torch "
                         f"{fmt(cell.torch_us)} us, ratio {fmt(cell.ratio, 3)} "
                         f"({config_text(cell.config)})")
        torch.cuda.empty_cache()
    return run
