"""Launching kernels from their launch descriptions (`ops.launch_spec`).

A `Launcher` is the seam between describing a launch and doing it: `run_kernel` launches,
`compile_kernel` only compiles (the tuner's parallel precompile), and tests pass their own
to record what would be launched. Nothing patches module globals.
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import lru_cache
from typing import Any, Callable

import torch

from det_suite.kernels import registry
from det_suite.kernels.grid_dependency import PDL_MIN_CAPABILITY, RELEASE_FIRST
from det_suite.ops.launch_spec import (KernelCall, gemm_launch_spec, quantize_launch_spec,
                                       selects_tma)
from det_suite.ops.validation import FP8_DTYPE
from det_suite.policy import LaunchConfig

# (kernel, call, bound runtime arguments, constexprs + options) -> whatever it returns
Launcher = Callable[[Any, KernelCall, list, dict], Any]


# Set to 0 to launch the batch-invariant ops without PDL (bits are the same either way): to
# time each kernel on its own, or where a driver mishandles programmatic launches. Set to
# "early" to have them release the next launch before they wait (`grid_dependency`
# RELEASE_FIRST): the same bits, a measured choice (docs/decode-step-kernels.md).
PDL_ENV = "DET_SUITE_PDL"
PDL_ENV_VALUES = ("0", "1", "early")


def programmatic_launch(device) -> bool | int:
    """How kernels on `device` are launched: False (plainly), True (programmatic dependent
    launch, PDL: wait, then release the next launch) or `RELEASE_FIRST` (PDL, releasing
    first). PDL needs a CUDA device of SM90 or newer and is on unless DET_SUITE_PDL=0. The
    interpreter (a CPU tensor) runs programs one after another and has no grid-dependency
    instructions; PDL only moves a GPU launch, never the arithmetic, so where it is off the
    bits are the same."""
    device = torch.device(device)
    setting = os.environ.get(PDL_ENV, "1")
    if setting not in PDL_ENV_VALUES:
        raise ValueError(f"{PDL_ENV} must be one of {', '.join(PDL_ENV_VALUES)}; "
                         f"got {setting!r}")
    if device.type != "cuda" or setting == "0":
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    if 10 * _capability_major(index) < PDL_MIN_CAPABILITY:
        return False
    return RELEASE_FIRST if setting == "early" else True


@lru_cache(maxsize=None)
def _capability_major(index: int) -> int:
    # Asked on every op call of an eager forward: the driver query is cached per device.
    return torch.cuda.get_device_capability(index)[0]


def run_kernel(kernel, call: KernelCall, args: list, keywords: dict):
    return kernel[call.grid](*args, **keywords)


def compile_kernel(kernel, call: KernelCall, args: list, keywords: dict):
    """Compile without running (a future under Triton's AsyncCompileMode)."""
    return kernel.warmup(*args, grid=call.grid, **keywords)


def _launch(calls, tensors: dict, launcher: Launcher) -> None:
    for call in calls:
        launcher(registry.kernel(call.kernel), call, call.bind(tensors), call.keywords())


_counter_buffers: dict[str, torch.Tensor] = {}
_retired_counter_buffers: list[torch.Tensor] = []
# Enough for any workspace tile grid the shipped tables launch (M <= 256 on N <= 34816 at
# 64x64 tiles is ~2k tiles), so the buffer is sized once at the first split-K launch.
_MIN_COUNTERS = 1 << 16


def split_k_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Per-tile arrival counters for the fused split-K fix-up, one zeroed buffer per device.

    Kernels leave every counter at zero when they finish, so the buffer serves every launch
    and every CUDA Graph replay. It is keyed by device, not stream: a graph is captured on
    its own stream after an eager warm-up on another, and must find the warm-up's buffer.
    The cost is that two split-K GEMMs must not run concurrently on different streams of one
    device (engines run linears on one stream). A buffer is never freed when it grows,
    because a captured graph keeps its raw pointer.
    """
    buf = _counter_buffers.get(str(device))
    if buf is None or buf.numel() < tiles:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("split-K counters must be allocated before CUDA Graph capture; "
                               "run the op once eagerly at the captured shape first")
        if buf is not None:
            _retired_counter_buffers.append(buf)
        buf = torch.zeros(max(tiles, _MIN_COUNTERS), dtype=torch.int32, device=device)
        _counter_buffers[str(device)] = buf
    return buf


def launch_quantize(x: torch.Tensor, scale: torch.Tensor, *,
                    launcher: Launcher = run_kernel) -> torch.Tensor:
    """Quantize an already-validated (M, K) activation with a validated scale."""
    m, k = x.shape
    q = torch.empty((m, k), dtype=FP8_DTYPE, device=x.device)
    if m == 0 or k == 0:
        return q
    _launch((quantize_launch_spec(m, k),), dict(x=x, q=q, scale=scale), launcher)
    return q


def launch_fp8_gemm(a: torch.Tensor, b_kn: torch.Tensor, a_scale: torch.Tensor,
                    b_scale: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                    config: LaunchConfig, *, segment_ends: tuple[int, ...] = (),
                    launcher: Launcher = run_kernel) -> torch.Tensor:
    """Launch the GEMM for already-validated operands: a (M, K) fp8, b_kn (K, N) fp8. A
    segmented GEMM (`segment_ends`, see `gemm_launch_spec`) takes a as its S stacked (M, K)
    activations, (S * M, K), and one scale per segment in a_scale and b_scale."""
    k = a.shape[1]
    m = a.shape[0] // (len(segment_ends) + 1)
    n = b_kn.shape[1]
    if (config.use_pdl or config.prefetch_k) and a.device.type != "cuda":
        # The interpreter runs programs one after another and has no grid-dependency or
        # prefetch instructions; both only move GPU work in time, so they are dropped there.
        config = replace(config, use_pdl=False, prefetch_k=0)
    if config.warp_specialized:
        config = _warp_specialized_on(config, a.device)
    spec = gemm_launch_spec(config, m, n, k, has_bias=bias is not None,
                            use_tma=selects_tma(config, a, b_kn), segment_ends=segment_ends)
    tensors = dict(a=a, b_kn=b_kn, b_nk=b_kn.t(), out=out, bias=bias, a_scale=a_scale,
                   b_scale=b_scale)
    if spec.workspace_shape is not None:
        tensors["partials"] = torch.empty(spec.workspace_shape, dtype=torch.float32,
                                          device=a.device)
    if spec.counter_tiles:
        tensors["counters"] = split_k_counters(a.device, spec.counter_tiles)
    _launch(spec.calls, tensors, launcher)
    return out


def _warp_specialized_on(config: LaunchConfig, device: torch.device) -> LaunchConfig:
    """A warp-specialised tile on `device`: its persistent grid sized to the SM count; off
    an SM90 GPU (the Triton interpreter cannot run Gluon; another GPU serving the SM90
    table under DET_SUITE_ARCH has no wgmma) the TMA tile, the same schedule."""
    if device.type != "cuda":
        return _served_tile(config, None)
    return _served_tile(config, device.index if device.index is not None
                        else torch.cuda.current_device())


@lru_cache(maxsize=None)
def _served_tile(config: LaunchConfig, index: int | None) -> LaunchConfig:
    # Cached: a launch on the eager path must not rebuild the config every call.
    if index is None or _capability_major(index) != 9:
        return replace(config, warp_specialized=False)
    return replace(config, max_programs=sm_count(index))


@lru_cache(maxsize=None)
def sm_count(index: int) -> int:
    """CUDA device `index`'s SM count (a driver query, cached per device)."""
    return torch.cuda.get_device_properties(index).multi_processor_count
