"""The control arms side by side in one process: prefill, decode step and end to end of
fast-stock, det and the old unfused stock arm on one loaded model, CUDA Graph decode, with
the arms interleaved A B C C B A so drift hits each alike (issue 39).

Each round runs every cell of an arm with `bench.e2e.boot.run_boot` (the bench e2e sample:
a prefill request, then the full request, cache flushed before each); the first round of an
arm adds one warm-up per cell. Reported: per arm and cell the median of every measured
sample, det / fast-stock and stock / fast-stock ratios, and the batch-1 decode step over
the weight-read floor (weight bytes / device copy bandwidth). `det-suite bench e2e` makes
the claim across fresh boots; this is the cheap in-process look that `tools/gpu_control.sh`
runs.

    python benchmarks/control_arms.py OUT.json [--model M] [--prefixes 128,2048,8192]
        [--batches 1,4] [--samples 3] [--output-tokens 32] [--arms fast-stock,det,stock]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--model", default="synthetic:qwen3-8b?seed=0")
    p.add_argument("--prefixes", type=_ints, default=(128, 2048, 8192))
    p.add_argument("--batches", type=_ints, default=(1, 4))
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--arms", default="fast-stock,det,stock")
    p.add_argument("--device", default=None)
    p.add_argument("--no-graph", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    import torch

    from det_suite.platform.interpreter import default_to_interpreter
    default_to_interpreter()
    from det_suite.backends.open import open_backend
    from det_suite.bench.e2e.arms import mode_kernels
    from det_suite.bench.e2e.boot import engine_limits, run_boot, weight_bytes
    from det_suite.bench.e2e.thermal import ThermalGate
    from det_suite.models.spec import load_model
    from det_suite.reports.environment import environment

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    graph = cuda and not args.no_graph
    started = time.perf_counter()
    checkpoint = load_model(args.model, device=device)
    load_s = time.perf_counter() - started
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    limits = engine_limits(args.prefixes, args.batches, args.output_tokens, args.page_size)
    backends = {a: open_backend("embedded", args.model, mode=a, cuda_graph=graph,
                                device=device, checkpoint=checkpoint,
                                page_size=args.page_size, **limits) for a in arms}
    gate = ThermalGate(None, None, timeout_s=1.0, poll_s=1.0, unavailable="not gated")
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    samples = {a: [] for a in arms}
    order = arms + arms[::-1]
    warmed, complete = set(), True
    try:        # Ctrl-C / timeout's SIGINT: keep the finished rounds and report them
        for arm in order:
            plan = {"prefixes": list(args.prefixes), "batches": list(args.batches),
                    "output_tokens": args.output_tokens, "seed": 0,
                    "warmup": 0 if arm in warmed else 1, "samples": args.samples}
            warmed.add(arm)
            t0 = time.perf_counter()
            samples[arm] += run_boot(backends[arm], plan, vocab=checkpoint.config.vocab_size,
                                     gate=gate, sync=sync)
            print(f"control_arms: round {arm} {time.perf_counter() - t0:.1f} s", flush=True)
    except KeyboardInterrupt:
        complete = False
        print("control_arms: interrupted; reporting the finished rounds", flush=True)
    for backend in backends.values():
        backend.close()
    arms = [a for a in arms if any(not s["warmup"] for s in samples[a])]
    if not arms:
        return 1

    floor_ms = None
    if cuda:
        from det_suite.bench.timing import copy_bandwidth
        floor_ms = weight_bytes(checkpoint) / copy_bandwidth() * 1e3
    cells = []
    for prefix in args.prefixes:
        for batch in args.batches:
            cell = {"prefix": prefix, "batch": batch, "arms": {}}
            for arm in arms:
                measured = [s for s in samples[arm] if s["prefix"] == prefix
                            and s["batch"] == batch and not s["warmup"]]
                cell["arms"][arm] = {m: statistics.median(s[m] for s in measured)
                                     for m in ("prefill_ms", "e2e_ms", "decode_ms_per_step")}
                cell["arms"][arm]["outputs"] = sorted({s["output_sha256"] for s in measured})
                if floor_ms and batch == 1:
                    cell["arms"][arm]["decode_floor_ratio"] = (
                        cell["arms"][arm]["decode_ms_per_step"] / floor_ms)
            reference = cell["arms"][arms[0]]
            cell["ratios"] = {f"{a}/{arms[0]}": {m: cell["arms"][a][m] / reference[m]
                                                 for m in ("prefill_ms", "e2e_ms",
                                                           "decode_ms_per_step")}
                              for a in arms[1:]}
            cells.append(cell)
            print(f"control_arms: prefix {prefix} batch {batch}: " + "; ".join(
                f"{k} e2e {v['e2e_ms']:.3f} prefill {v['prefill_ms']:.3f} step "
                f"{v['decode_ms_per_step']:.3f}" for k, v in cell["ratios"].items()),
                flush=True)
    payload = {"kind": "control-arms", "complete": complete, "model": args.model,
               "device": str(device),
               "cuda_graph": graph, "order": order, "samples_per_round": args.samples,
               "output_tokens": args.output_tokens, "load_s": load_s,
               "floor_ms": floor_ms, "kernels": {a: mode_kernels(a) for a in arms},
               "cells": cells, "samples": samples, "environment": environment(),
               "seconds": time.perf_counter() - started}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=1))
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
