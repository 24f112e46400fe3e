"""GPU timing primitives. Every function returns a median in microseconds per call.

Three ways to time one call of `fn` (a closure that launches the work, no host syncs):

- `flush`: L2 flushed before every timed call with `triton.testing.do_bench`'s own flush
  (its 256 MiB benchmark buffer, zeroed), so the operands come from HBM (the decode
  situation: a layer's weight was evicted by the other layers since its last use).
  do_bench itself starts the timer right after the flush; a launch whose host-side work
  (Python, TMA descriptors) outlasts the flush would then be timed with the launch gap in
  front of it, so the loop here adds the same padding as `warm` between flush and call.
- `warm`: the same operands back to back, L2 left warm. Triton 3.6's do_bench always
  clears L2, so this is its own loop: before each timed call a `torch.cuda._sleep` kernel
  (no memory traffic, L2 untouched) keeps the GPU busy longer than the host needs to
  enqueue the call; without that padding a 5 us kernel would be timed together with the
  ~20 us Python launch gap in front of it.
- `graph`: N calls captured back to back into one CUDA Graph after a warm-up; replays are
  timed and divided by N. No host overhead at all, L2 warm (what a decode step replayed
  from a graph sees for its activations).

`copy_bandwidth` measures device-to-device copy throughput in bytes read + written per
second: the denominator of the weight-bytes floor for memory-bound (small-M) GEMMs.
"""

from __future__ import annotations

import math
import statistics
import time
from functools import lru_cache
from typing import Any, Callable

import torch

from det_suite.bench import MODES

NO_GPU_MESSAGE = "{what} needs a CUDA GPU; found none"
INTERPRETER_MESSAGE = ("{what} needs a CUDA GPU with compiled kernels, but TRITON_INTERPRET "
                       "is set: speed claims never come from the interpreter")


class GpuRequired(RuntimeError):
    """Raised when timing is asked for on a machine (or mode) that cannot time kernels."""


def gpu_problem(what: str) -> str | None:
    """Why `what` cannot time kernels here, or None when a real CUDA GPU is usable."""
    from det_suite.platform.family import interpreter_active

    if not torch.cuda.is_available():
        return NO_GPU_MESSAGE.format(what=what)
    if interpreter_active():
        return INTERPRETER_MESSAGE.format(what=what)
    return None


def require_gpu(what: str) -> None:
    problem = gpu_problem(what)
    if problem is not None:
        raise GpuRequired(problem)


def _median(values: list[float]) -> float:
    if not values:
        raise ValueError("no timings to summarise")
    return float(statistics.median(values))


def _clamp(value: float, low: int, high: int) -> int:
    return int(max(low, min(high, value)))


# ------------------------------------------------------------------ padding kernel

@lru_cache(maxsize=None)
def _sleep_cycles_per_us(device_index: int) -> float:
    """Clock cycles `torch.cuda._sleep` spins per microsecond on this GPU (measured)."""
    cycles = 2_000_000
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    elapsed_us = start.elapsed_time(end) * 1e3
    return cycles / max(elapsed_us, 1.0)


def _host_us_per_call(fn: Callable[[], Any], calls: int = 3) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host_us = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return host_us


def _padding_cycles(fn: Callable[[], Any]) -> tuple[int, float]:
    """Sleep long enough that the host always enqueues the next call before the GPU is idle."""
    pad_us = max(20.0, 2.0 * _host_us_per_call(fn) + 10.0)
    return int(pad_us * _sleep_cycles_per_us(torch.cuda.current_device())), pad_us


def _timed_padded(fn: Callable[[], Any], reps: int, pad_cycles: int,
                  before: Callable[[], Any] | None = None) -> list[float]:
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if before is not None:
            before()
        torch.cuda._sleep(pad_cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


# ------------------------------------------------------------------ the three modes

def do_bench_median_us(fn: Callable[[], Any], *, warmup_ms: float = 25.0,
                       rep_ms: float = 100.0) -> float:
    """Plain `triton.testing.do_bench` median (flushes L2 before each call, no padding):
    right for long calls such as the bandwidth probe, where launch gaps do not matter."""
    import triton.testing

    require_gpu("do_bench timing")
    ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    return float(ms) * 1e3


@lru_cache(maxsize=None)
def _flush_buffer(device_index: int):
    import triton

    return triton.runtime.driver.active.get_empty_cache_for_benchmark()


def _flush_l2() -> None:
    import triton

    triton.runtime.driver.active.clear_cache(_flush_buffer(torch.cuda.current_device()))


@lru_cache(maxsize=None)
def _flush_us(device_index: int) -> float:
    _flush_l2()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        _flush_l2()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / 5


def _padded_median_us(fn: Callable[[], Any], *, warmup_ms: float, rep_ms: float,
                      max_reps: int, before: Callable[[], Any] | None = None,
                      before_us: float = 0.0) -> float:
    """Median of padded single-call timings, `before` (untimed) ahead of every call."""
    fn()
    torch.cuda.synchronize()
    pad_cycles, pad_us = _padding_cycles(fn)
    estimate_us = _median(_timed_padded(fn, 5, pad_cycles, before=before))
    period_us = estimate_us + pad_us + before_us
    for _ in range(_clamp(warmup_ms * 1e3 / period_us, 1, max_reps)):
        if before is not None:
            before()
        fn()
    return _median(_timed_padded(fn, _clamp(rep_ms * 1e3 / period_us, 5, max_reps),
                                 pad_cycles, before=before))


def flushed_median_us(fn: Callable[[], Any], *, warmup_ms: float = 25.0, rep_ms: float = 100.0,
                      max_reps: int = 5000) -> float:
    """Median time of one call with L2 flushed before it (do_bench's flush buffer)."""
    require_gpu("cache-flushed timing")
    return _padded_median_us(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, max_reps=max_reps,
                             before=_flush_l2,
                             before_us=_flush_us(torch.cuda.current_device()))


def warm_median_us(fn: Callable[[], Any], *, warmup_ms: float = 25.0, rep_ms: float = 100.0,
                   max_reps: int = 5000) -> float:
    """Median time of one call with L2 warm (same operands back to back)."""
    require_gpu("warm-L2 timing")
    return _padded_median_us(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, max_reps=max_reps)


def graph_median_us(fn: Callable[[], Any], *, calls_per_graph: int | None = None,
                    warmup_ms: float = 25.0, rep_ms: float = 100.0,
                    target_graph_us: float = 400.0, max_calls_per_graph: int = 64) -> float:
    """Median time of one call inside a CUDA Graph of `calls_per_graph` back-to-back calls.

    `calls_per_graph=None` sizes the graph to about `target_graph_us` from an eager estimate.
    Work `fn` allocates (outputs, split-K workspaces) comes from the graph's private pool.
    """
    require_gpu("CUDA Graph timing")
    # Warm up on the stream the graph is captured on, so everything a first call allocates
    # or compiles (Triton JIT, det-suite's split-K arrival counters) exists before capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if calls_per_graph is None:
        pad_cycles, _ = _padding_cycles(fn)
        eager_us = _median(_timed_padded(fn, 3, pad_cycles))
        calls_per_graph = _clamp(math.ceil(target_graph_us / max(eager_us, 1e-3)), 1,
                                 max_calls_per_graph)
    if calls_per_graph < 1:
        raise ValueError(f"calls_per_graph must be >= 1; got {calls_per_graph}")
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=side):
            for _ in range(calls_per_graph):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        replay = graph.replay
        pad_cycles, pad_us = _padding_cycles(replay)
        estimate_us = _median(_timed_padded(replay, 3, pad_cycles))
        period_us = estimate_us + pad_us
        for _ in range(_clamp(warmup_ms * 1e3 / period_us, 1, 1000)):
            replay()
        times = _timed_padded(replay, _clamp(rep_ms * 1e3 / period_us, 5, 2000), pad_cycles)
    finally:
        del graph
    return _median(times) / calls_per_graph


def make_timer(mode: str, *, warmup_ms: float = 25.0,
               rep_ms: float = 100.0) -> Callable[[Callable[[], Any]], float]:
    """A `fn -> median us` function for one of MODES."""
    if mode == "warm":
        return lambda fn: warm_median_us(fn, warmup_ms=warmup_ms, rep_ms=rep_ms)
    if mode == "flush":
        return lambda fn: flushed_median_us(fn, warmup_ms=warmup_ms, rep_ms=rep_ms)
    if mode == "graph":
        return lambda fn: graph_median_us(fn, warmup_ms=warmup_ms, rep_ms=rep_ms)
    raise ValueError(f"timing mode {mode!r} is not one of {', '.join(MODES)}")


def launch_floor_us(timer: Callable[[Callable[[], Any]], float]) -> float:
    """Time per call of an empty one-program kernel under `timer` (a `make_timer` mode):
    launch and timing overhead, the part of every GEMM's time no kernel can remove."""
    from det_suite.bench.noop_kernel import noop_kernel

    require_gpu("launch floor probe")
    return timer(lambda: noop_kernel[(1,)]())


# ------------------------------------------------------------------ bandwidth probe

def copy_bandwidth(nbytes: int = 1 << 30, *, rep_ms: float = 100.0) -> float:
    """Device-to-device copy throughput in bytes (read + written) per second.

    The copied buffer (default 1 GiB) is far larger than L2, so this is HBM bandwidth as a
    streaming kernel sees it (4.27e12 on the H200, docs/invariance-rule.md).
    """
    require_gpu("copy bandwidth probe")
    if nbytes < 1 << 20:
        raise ValueError(f"nbytes must be at least 1 MiB to measure HBM; got {nbytes}")
    src = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = do_bench_median_us(lambda: dst.copy_(src), warmup_ms=10.0, rep_ms=rep_ms)
    return 2.0 * nbytes / (us * 1e-6)


def l2_cache_bytes() -> int | None:
    """L2 size of the current GPU, when torch reports it."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return getattr(props, "L2_cache_size", None)
