"""Compiling a batch of GEMM launches in parallel threads before they are timed.

A launch is kept as a `GemmLaunch` (its operands and config); called with no argument it
runs (`ops.run_kernel`), and `precompile_launches` calls it with `ops.compile_kernel`, the
launcher that compiles without running. `launch_fp8_gemm` builds the argument lists either
way, so the compiled kernels land in the JIT cache under the keys the real launches look
up. Nothing is patched.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from det_suite.policy import LaunchConfig

if TYPE_CHECKING:
    import torch

    from det_suite.ops import Launcher


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True, eq=False)
class GemmLaunch:
    """One `launch_fp8_gemm` call, made when called: run (the default launcher) or, with
    `ops.compile_kernel`, compiled only."""

    a: "torch.Tensor"
    b_kn: "torch.Tensor"
    a_scale: "torch.Tensor"
    b_scale: "torch.Tensor"
    out: "torch.Tensor"
    config: LaunchConfig
    bias: "torch.Tensor | None" = None

    def __call__(self, launcher: "Launcher | None" = None):
        from det_suite.ops import launch_fp8_gemm, run_kernel

        return launch_fp8_gemm(self.a, self.b_kn, self.a_scale, self.b_scale, self.bias,
                               self.out, self.config, launcher=launcher or run_kernel)


# A launch that takes a launcher: a GemmLaunch, or any callable passing it on to
# launch_fp8_gemm(..., launcher=...).
Launch = Callable[["Launcher"], Any]


def precompile_launches(launches: Sequence[Launch], *, workers: int | None = None,
                        log: Callable[[str], None] = stderr_log) -> bool:
    """Compile the kernels `launches` would run, in parallel threads, without running them:
    each is called with `ops.compile_kernel` under Triton's AsyncCompileMode. Returns False
    (and compiles nothing) where Triton has no AsyncCompileMode; kernels then compile at
    first launch as usual."""
    if not launches:
        return True
    from det_suite.platform.triton_compat import require_supported

    require_supported()
    try:
        from triton import AsyncCompileMode
    except ImportError:
        try:
            from triton.runtime._async_compile import AsyncCompileMode
        except ImportError:
            return False
    from concurrent.futures import ThreadPoolExecutor

    from det_suite.ops import compile_kernel

    workers = workers or max(1, min(32, (os.cpu_count() or 2)))
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool, \
                AsyncCompileMode(pool, ignore_errors=True):
            failed = []
            for launch in launches:
                try:
                    launch(compile_kernel)
                except Exception as exc:  # noqa: BLE001 - the real launch reports it
                    failed.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        if failed:
            log(f"{len(failed)} of {len(launches)} launches not precompiled (they compile at "
                f"first launch); first: {failed[0]}")
    except Exception as exc:  # noqa: BLE001
        log(f"parallel compile unavailable ({type(exc).__name__}: {exc}); compiling serially")
        return False
    return True
