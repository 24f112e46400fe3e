"""Which decode GEMM tiles should ask L2 for their weights before the PDL wait (issue 15, H200).

A batch-1 decode step spends about a quarter of its time in norms, quantizations and
attention, while DRAM idles; a PDL-launched GEMM tile with `prefetch_k` has L2 fetch its
weight rows during the kernel before it (`kernels/l2_prefetch.py`). Which tiles gain is a
measurement: a multi-wave grid launched early measured slower with PDL alone. This runs the
arms below on one model, in one process (the model is built once; each arm builds an
engine, so its decode graph is captured with the arm's tiles):

- shipped:        the sm90 table as shipped
- pf-pdl:         every TMA tile that already has PDL prefetches its whole K range
- pf-single-wave: also every other decode tile (swap_ab, M <= 16) whose grid fits the GPU
                  at once gets PDL + prefetch (Qwen3-8B's split-K down projection)
- pf-all-decode:  also the multi-wave decode tiles (gate_up), prefetching their first
                  MULTI_WAVE_PREFETCH_K elements only, so early programs do not flood L2
- <arm>+early:    the same tiles with DET_SUITE_PDL=early: the small ops release the next
                  launch before they wait, so a GEMM is resident (and prefetching) one
                  kernel earlier (`kernels/grid_dependency.py` RELEASE_FIRST)

Per arm and prefix: the decode step as `bench e2e` measures it and the graph replay alone
(tools/profile_decode.py's helpers), and whether a fixed greedy generation gives the shipped
arm's token ids and logprobs bit for bit (prefetch moves traffic, never arithmetic: any
difference is a bug). Every arm's table is validated like a shipped one before it runs.

Developer tool (GPU): writes sweep.json and sweep.md into OUT_DIR.
    python tools/decode_prefetch_sweep.py OUT_DIR [--model synthetic:qwen3-8b?seed=0]
        [--prefix 128,2048] [--tokens 32] [--arms shipped,pf-pdl,...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from det_suite.backends.interface import Request
from det_suite.bench.e2e.boot import weight_bytes
from det_suite.bench.sweep_cli import load_tool
from det_suite.bench.timing import copy_bandwidth
from det_suite.engine import Engine
from det_suite.models.spec import load_model
from det_suite.ops import linear as linear_ops
from det_suite.ops.launch import PDL_ENV
from det_suite.policy import L2_LINE_ELEMENTS, parse_payload, policy_json, shipped_policy
from det_suite.reports.files import write_json_atomic, write_text_atomic

MULTI_WAVE_PREFETCH_K = 1024
CHECK_PROMPT = 200  # tokens of the bit-for-bit check's prompt (profile_decode's prompts)
CHECK_TOKENS = 16
TABLE_ARMS = ("shipped", "pf-pdl", "pf-single-wave", "pf-all-decode")
EARLY = "+early"
ARMS = (*TABLE_ARMS, f"shipped{EARLY}", f"pf-single-wave{EARLY}", f"pf-all-decode{EARLY}")


def _profile_helpers():
    return load_tool(Path(__file__).with_name("profile_decode.py"))


def _whole_chunk(entry, tile) -> int:
    config = entry.select(tile.max_m if tile.max_m is not None else 1 << 30)
    chunk = config.k_chunk(entry.k)
    return -(-chunk // L2_LINE_ELEMENTS) * L2_LINE_ELEMENTS


def _programs(entry, tile) -> int:
    config = entry.select(tile.max_m)
    return (-(-entry.n // config.block_n) * -(-tile.max_m // config.block_m)
            * (config.split_k if config.use_workspace else 1))


def arm_policy(arm: str, sm_count: int):
    """The sm90 table with the arm's tiles changed, validated as a table file would be."""
    arm = arm.removesuffix(EARLY)
    base = shipped_policy("sm90")
    if arm == "shipped":
        return base.on_device(sm_count)
    entries = {}
    for key, entry in base.entries.items():
        tiles = []
        for tile in entry.m_tiles:
            decode = tile.swap_ab and tile.max_m is not None and tile.max_m <= 16
            if tile.use_pdl and tile.use_tma:
                tile = replace(tile, prefetch_k=_whole_chunk(entry, tile))
            elif decode and arm in ("pf-single-wave", "pf-all-decode") \
                    and _programs(entry, tile) <= sm_count:
                tile = replace(tile, use_pdl=True, prefetch_k=_whole_chunk(entry, tile))
            elif decode and arm == "pf-all-decode":
                tile = replace(tile, use_pdl=True,
                               prefetch_k=min(MULTI_WAVE_PREFETCH_K, _whole_chunk(entry, tile)))
            tiles.append(tile)
        entries[key] = replace(entry, m_tiles=tuple(tiles))
    policy = replace(base, entries=entries)
    return parse_payload(policy_json(policy), f"arm {arm}").on_device(sm_count)


def _generation(engine: Engine, prompt) -> dict:
    engine.flush_cache()
    (done,) = engine.generate([Request(prompt_ids=prompt, max_new_tokens=CHECK_TOKENS,
                                       logprobs_from=1)])
    return {"ids": list(done.output_ids), "logprobs": [float(v).hex() for v in done.logprobs]}


def main(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--model", default="synthetic:qwen3-8b?seed=0")
    p.add_argument("--prefix", default="128,2048")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--arms", default=",".join(ARMS))
    args = p.parse_args(argv)
    arms = args.arms.split(",")
    unknown = sorted({a.removesuffix(EARLY) for a in arms} - set(TABLE_ARMS))
    if unknown or arms[0] != "shipped":
        p.error(f"--arms: names from {', '.join(TABLE_ARMS)} (each optionally with "
                f"{EARLY}), starting with shipped; got {args.arms}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (it times decode steps)")
    helpers = _profile_helpers()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    ckpt = load_model(args.model, device="cuda")
    vocab = ckpt.config.vocab_size
    # The floor, as `bench e2e` measures it: the weights read once at the measured
    # device-to-device copy rate.
    floor_ms = weight_bytes(ckpt) / copy_bandwidth() * 1e3
    print(f"model built, floor {floor_ms:.3f} ms [{time.time() - t0:.0f}s]", flush=True)
    result = {"model": args.model, "gpu": torch.cuda.get_device_name(), "sm_count": sm_count,
              "torch": torch.__version__, "floor_ms": floor_ms, "arms": []}
    reference = None
    real_policy = linear_ops._device_policy
    real_pdl = os.environ.get(PDL_ENV)
    try:
        for arm in arms:
            policy = arm_policy(arm, sm_count)
            linear_ops._device_policy = lambda _type, _index, _p=policy: _p
            os.environ[PDL_ENV] = "early" if arm.endswith(EARLY) else "1"
            engine = Engine(ckpt, mode="det", cuda_graph=True, graph_batch_sizes=(1,),
                            max_seq_len=4096)
            generation = _generation(engine, helpers._prompt(CHECK_PROMPT, vocab))
            reference = reference or generation
            row = {"arm": arm, "same_bits_as_shipped": generation == reference,
                   "tiles": sorted({f"{e.key} {t.max_m}: pdl={t.use_pdl} pf={t.prefetch_k}"
                                    for e in policy.entries.values() for t in e.m_tiles
                                    if t.prefetch_k}),
                   "cells": []}
            for prefix in (int(v) for v in args.prefix.split(",")):
                cell = helpers.decode_cell(engine, prefix, vocab, args.tokens)
                row["cells"].append(cell)
                print(f"{arm}: prefix {prefix}: step {cell['step_ms']:.3f} ms, replay "
                      f"{cell['replay_ms']:.3f} ms, same bits {row['same_bits_as_shipped']} "
                      f"[{time.time() - t0:.0f}s]", flush=True)
            result["arms"].append(row)
            # Written after every arm: a run cut short (a device call's time limit) keeps
            # the arms it finished.
            write_json_atomic(out / "sweep.json", result)
            write_text_atomic(out / "sweep.md", render(result))
            del engine
            helpers.free_engine_memory()
    finally:
        linear_ops._device_policy = real_policy
        if real_pdl is None:
            os.environ.pop(PDL_ENV, None)
        else:
            os.environ[PDL_ENV] = real_pdl
    return 0 if all(a["same_bits_as_shipped"] for a in result["arms"]) else 1


def render(result: dict) -> str:
    base = {c["prefix"]: c for c in result["arms"][0]["cells"]}
    floor = result["floor_ms"]
    lines = [f"# Decode GEMM weight prefetch sweep ({result['gpu']}, {result['model']})", "",
             "Batch-1 CUDA Graph decode step, det mode; ratio = arm / shipped; x floor = step /"
             f" {floor:.3f} ms (the weights read once at the measured copy rate; target 1.5).",
             "", "| arm | prefix | step ms | replay ms | step ratio | x floor | same bits |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for arm in result["arms"]:
        for cell in arm["cells"]:
            ratio = cell["step_ms"] / base[cell["prefix"]]["step_ms"]
            lines.append(f"| {arm['arm']} | {cell['prefix']} | {cell['step_ms']:.3f} | "
                         f"{cell['replay_ms']:.3f} | {ratio:.3f} | {cell['step_ms'] / floor:.2f} | "
                         f"{'yes' if arm['same_bits_as_shipped'] else '**no**'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
