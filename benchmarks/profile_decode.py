"""Where a batch-1 decode step of the embedded engine spends its time (CUDA GPU only).

`bench e2e` reports a decode step as (end-to-end - prefill) / tokens: the CUDA Graph replay
plus the host work around it (building the step's metadata, copying it into the graph's
static inputs, picking the token). This splits the two and breaks the replay down by kernel:

- step_ms: a full `Engine.generate` decode step, measured like `bench e2e`;
- replay_ms: the decode graph replayed back to back (CUDA events, no host work between);
- host_ms: step_ms - replay_ms;
- kernels: torch.profiler over graph replays (CUPTI records the kernels of a replay), per
  kernel name: calls per step, device microseconds per step, and the share of the replay;
- launches_per_step and the idle gap: replay time not covered by any kernel.

With programmatic dependent launch (the SM90+ default for the batch-invariant ops) a kernel
starts early and waits for its predecessor, and CUPTI counts the wait in its duration, so
the per-kernel column over-counts those kernels; `--no-pdl` launches the ops plainly
(DET_SUITE_PDL=0, the same bits) to time each kernel on its own. The FP8 GEMMs' PDL comes
from their tile table and stays.

Developer tool: writes JSON and a text table. Usage:
    python benchmarks/profile_decode.py OUT_DIR [--model synthetic:qwen3-8b?seed=0] [--mode det]
        [--prefix 128,2048] [--tokens 32] [--no-pdl]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

import torch

from det_suite.backends.interface import Request
from det_suite.engine import Engine
from det_suite.models.spec import load_model
from det_suite.reports.files import write_json_atomic

REPLAYS = 50


def _prompt(prefix: int, vocab: int) -> tuple[int, ...]:
    g = torch.Generator().manual_seed(prefix)
    return tuple(torch.randint(0, vocab, (prefix,), generator=g).tolist())


def generate_ms(engine: Engine, prompt, tokens: int) -> float:
    """Milliseconds of one cold `Engine.generate` of `prompt` and `tokens` new tokens (the
    prefix cache flushed first); tokens=1 is the prefill alone."""
    engine.flush_cache()
    torch.cuda.synchronize()
    started = time.perf_counter()
    engine.generate([Request(prompt_ids=prompt, max_new_tokens=tokens)])
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3


def _step_ms(engine: Engine, prompt, tokens: int) -> float:
    prefill = generate_ms(engine, prompt, 1)
    return (generate_ms(engine, prompt, tokens) - prefill) / (tokens - 1)


def _set_context(engine: Engine, prefix: int) -> None:
    """Point the batch-1 graph's static inputs at a request with `prefix` cached tokens."""
    static = engine.graphs._inputs[1]
    pages = prefix // engine.page_size + 1
    static.block_tables[0, :pages] = torch.arange(1, pages + 1, dtype=torch.int32)
    static.context_lens[0] = prefix
    static.positions[0] = prefix
    static.slot_mapping[0] = pages * engine.page_size + prefix % engine.page_size


def _replay_ms(engine: Engine) -> float:
    replay = engine.graphs._replays[1]
    for _ in range(5):
        replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / REPLAYS


def decode_cell(engine: Engine, prefix: int, vocab: int, tokens: int) -> dict:
    """A batch-1 decode step at `prefix` cached tokens: the host-timed step and the graph
    replay, medians of three after a warm-up; the batch-1 graph is left pointing at it."""
    prompt = _prompt(prefix, vocab)
    _step_ms(engine, prompt, 4)                   # warm
    steps = sorted(_step_ms(engine, prompt, tokens) for _ in range(3))
    _set_context(engine, prefix)
    replays = sorted(_replay_ms(engine) for _ in range(3))
    return {"prefix": prefix, "step_ms": steps[1], "replay_ms": replays[1]}


def free_engine_memory() -> None:
    """After a sweep drops an engine: collect it (its CUDA graphs hold their memory pool
    until collected) and hand the cached blocks back, so the next arm's engine fits."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def replay_summary(cells) -> str:
    """The graph replay of each timed prefix, for a sweep's progress line."""
    return "".join(f"; prefix {c['prefix']} replay {c['replay_ms']:.3f} ms" for c in cells)


def _kernel_table(engine: Engine, steps: int = 10) -> dict:
    from torch.profiler import ProfilerActivity, profile

    replay = engine.graphs._replays[1]
    replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name = collections.defaultdict(lambda: [0, 0.0])
    spans = []
    for e in kernels:
        by_name[e.name][0] += 1
        by_name[e.name][1] += e.device_time
        spans.append((e.time_range.start, e.time_range.end))
    spans.sort()
    busy, cursor = 0.0, None
    for s, t in spans:
        if cursor is None or s > cursor:
            busy += t - s
            cursor = t
        elif t > cursor:
            busy += t - cursor
            cursor = t
    total = sum(v[1] for v in by_name.values())
    rows = sorted(({"kernel": k[:120], "calls_per_step": c / steps, "us_per_step": us / steps,
                    "share": us / total if total else 0.0} for k, (c, us) in by_name.items()),
                  key=lambda r: -r["us_per_step"])
    wall = (spans[-1][1] - spans[0][0]) / steps if spans else 0.0
    return {"launches_per_step": len(kernels) / steps, "kernel_us_per_step": total / steps,
            "busy_us_per_step": busy / steps, "span_us_per_step": wall, "kernels": rows}


def main(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--model", default="synthetic:qwen3-8b?seed=0")
    p.add_argument("--mode", default="det", choices=("det", "stock"))
    p.add_argument("--prefix", default="128,2048")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--no-pdl", action="store_true",
                   help="launch the batch-invariant ops without PDL (per-kernel timing)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_decode: needs a CUDA GPU (it times CUDA Graph replays); none is visible",
              file=sys.stderr)
        return 2
    if args.no_pdl:
        from det_suite.ops.launch import PDL_ENV
        os.environ[PDL_ENV] = "0"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    ckpt = load_model(args.model, device="cuda")
    print(f"model built [{time.time() - t0:.0f}s]", flush=True)
    engine = Engine(ckpt, mode=args.mode, cuda_graph=True, graph_batch_sizes=(1,),
                    max_seq_len=4096)
    print(f"engine + graph capture [{time.time() - t0:.0f}s]", flush=True)
    vocab = ckpt.config.vocab_size
    result = {"model": args.model, "mode": args.mode, "ops_pdl": not args.no_pdl,
              "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "cells": []}
    for prefix in (int(v) for v in args.prefix.split(",")):
        cell = decode_cell(engine, prefix, vocab, args.tokens)
        table = _kernel_table(engine)
        cell.update(host_ms=cell["step_ms"] - cell["replay_ms"], **table)
        result["cells"].append(cell)
        print(f"prefix {prefix}: step {cell['step_ms']:.3f} ms, replay {cell['replay_ms']:.3f} "
              f"ms, host {cell['host_ms']:.3f} ms, {table['launches_per_step']:.0f} launches, "
              f"kernel sum {table['kernel_us_per_step'] / 1e3:.3f} ms, busy "
              f"{table['busy_us_per_step'] / 1e3:.3f} ms [{time.time() - t0:.0f}s]", flush=True)
        for row in table["kernels"][:25]:
            print(f"  {row['us_per_step']:9.1f} us {row['calls_per_step']:6.1f}x "
                  f"{row['share'] * 100:5.1f}%  {row['kernel']}", flush=True)
    write_json_atomic(out / f"profile_decode_{args.mode}.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
