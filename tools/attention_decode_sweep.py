"""Which launch of the decode attention is fastest with the shipped bits (issue 15, H200).

Evidence h's per-kernel profile (docs/decode-step-kernels.md) had the batch-1 decode
attention at 8 us a layer at prefix 128 and 19 us at prefix 2048, where its K/V bytes take
~2 us to read. What helps is a measurement, and every candidate must give the shipped bits (a
query row's reduction order is the op's contract: the same bits as a prefill of the row).
This runs the arms below through `paged_attention`'s `launcher` seam, so the op, its launch
spec and the combine kernel are the shipped ones; only the split kernel's launch changes:

- shipped:         the split kernel as the op launches it: a KV head's query heads packed
                   into one MMA tile (`kernels/bi_attention_split.py`), read once per tile
- one-head:        one query head per program (HEADS 1), the launch before packing: each of
                   a GROUP's heads reads the KV head's tiles again
- stages-1/3/4:    its software pipeline 1, 3 or 4 stages deep (the shipped tile has 2)
- warps-8:         eight warps instead of four
- block-q-16:      a 16-row query tile instead of 64; on SM90 a 16-row bf16 dot compiles to
                   mma.sync rather than wgmma, so the bit check decides whether it is a
                   candidate at all (and the lint wants the tile kernel's instruction)
- segment-128/64:  a shorter SEGMENT for every attention kernel (the prefill tile kernel,
                   the split kernel and the combine): more programs, each a shorter chain of
                   dependent tiles, and more partials to merge. SEGMENT is part of the
                   canonical order, so these change the bits by design: their check is the
                   contract itself, the decode row equal to the same query's row in a
                   prefill at that SEGMENT, and they must differ from the shipped bits (the
                   proof the segment changed)

Measured out before packing landed (H200, 2026-12-04, docs/decode-step-kernels.md):
packing won (2048 keys: 18.1 -> 13.0 us at batch 1, 52.9 -> 19.2 us at batch 4); deeper
pipelines, eight warps and loads issued one tile ahead of the arithmetic by hand all lost,
with or without packing (Triton's two-stage pipeline already overlaps them).

Per arm and cell (prefix x batch, Qwen3-8B heads: 32 query, 8 KV, head_dim 128, page 16,
block tables as wide as `--max-seq-len`, so the grid has the engine's segments, most of them
returning at once: `bench e2e` sizes its tables for its longest cell, 2048 + 32 keys):
the op's time per call with CUDA Graph replay (L2 warm) and with L2 flushed before each call
(a decode step's layers evict each other's K/V), and whether its output equals the shipped
arm's; a positive control arm (BLOCK_KV 32: another tile order inside a segment) must
differ. On a CPU (`--device cpu`, Triton's interpreter) it checks the bits only, at small
heads and contexts: the unit test runs that.

Developer tool: writes attention_sweep.json and attention_sweep.md into OUT_DIR.
    python tools/attention_decode_sweep.py OUT_DIR [--prefix 128,2048] [--batch 1,4]
        [--arms shipped,one-head,...] [--max-seq-len 2080] [--device cuda|cpu]
A winning arm moves into det_suite (ATTENTION_SPLIT_TILE; a segment: ATTENTION_TILE, which
re-records the GSM8K fixture) with an H200 evidence run: the tiles are result dependencies.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from dataclasses import replace
from pathlib import Path


from det_suite.bench.sweep_cli import (add_device_option, control_verdict, cpu_requested,
                                       finish, int_list, load_tool, same_bits, wants_gpu)

if __name__ == "__main__" and cpu_requested(sys.argv[1:]):
    # The interpreter must be chosen before Triton is imported (platform/interpreter.py).
    from det_suite.platform.interpreter import use_interpreter
    use_interpreter()

import torch  # noqa: E402 - after the interpreter switch
import triton  # noqa: E402

from det_suite.ops import bi_launch_spec  # noqa: E402
from det_suite.ops.batch_invariant import ATTENTION_TILE, paged_attention, write_kv  # noqa: E402

SPLIT_KERNEL = "bi_paged_attention_split_kernel"
QWEN3_8B_HEADS = (32, 8, 128)   # query heads, KV heads, head_dim
CPU_HEADS = (4, 2, 16)
PAGE = 16
# Arm -> launch options of the split kernel (HEADS: query heads per program).
ARMS = {
    "shipped": {},
    "one-head": {"HEADS": 1},
    "stages-1": {"num_stages": 1},
    "stages-3": {"num_stages": 3},
    "stages-4": {"num_stages": 4},
    "warps-8": {"num_warps": 8},
    "block-q-16": {"BLOCK_Q": 16},
    "control-block-kv-32": {"BLOCK_KV": 32},
}
CONTROL = "control-block-kv-32"   # must differ: the harness can see a changed order
# Arm -> the SEGMENT every attention kernel runs with (`segment_tiles`): a new canonical order.
SEGMENT_ARMS = {"segment-128": 128, "segment-64": 64}
# Arm -> whether the folded kernel (tools/attention_fold_kernel.py: the combine done by each
# row's last-arriving segment program, one launch) waits with programmatic dependent launch.
FOLD_ARMS = {"fold": False, "fold-pdl": True}
ALL_ARMS = (*ARMS, *SEGMENT_ARMS, *FOLD_ARMS)
COMBINE_KERNEL = "bi_paged_attention_combine_kernel"


ATTENTION_TILE_NAMES = ("ATTENTION_TILE", "ATTENTION_SPLIT_TILE", "ATTENTION_COMBINE_TILE")


@contextlib.contextmanager
def attention_tiles(names=ATTENTION_TILE_NAMES, **overrides):
    """The named tiles of `ops.bi_launch_spec` with `overrides` (constexpr name -> value, for
    the names a tile has) while inside: every launch spec built then uses them."""
    saved = {name: getattr(bi_launch_spec, name) for name in names}
    for name, tile in saved.items():
        setattr(bi_launch_spec, name, replace(tile, tile=tuple(
            (key, overrides.get(key, value)) for key, value in tile.tile)))
    try:
        yield
    finally:
        for name, tile in saved.items():
            setattr(bi_launch_spec, name, tile)


def segment_tiles(segment: int | None):
    """Every attention launch spec (tile kernel, split kernel, combine, the split grid and
    its workspace) built with SEGMENT = `segment` while inside; None: as shipped."""
    if segment is None:
        return contextlib.nullcontext()
    if segment % ATTENTION_TILE["BLOCK_KV"]:
        raise ValueError(f"segment must be a multiple of BLOCK_KV "
                         f"{ATTENTION_TILE['BLOCK_KV']}; got {segment}")
    return attention_tiles(SEGMENT=segment)


@functools.lru_cache(maxsize=None)
def _fold_kernel():
    # Loaded once: a second load would be a new JIT function, compiled again.
    return load_tool(Path(__file__).with_name("attention_fold_kernel.py")
                     ).bi_paged_attention_fold_kernel


def fold_launcher(pdl: bool, launches: list | None = None):
    """A `paged_attention` launcher that replaces the split shape's two launches (the split
    kernel, then the combine) by one launch of the folded kernel on the split grid, with the
    split's arguments and constexprs and the combine's output and epilogue; every other
    kernel as the op launches it. The folded launches made are appended to `launches`
    (default: a new list), also `launcher.launches`. The arrival counters are
    `ops.launch.split_k_counters`' buffer: its users leave it at zero and never overlap (a
    PDL launch waits for the previous grid before touching memory)."""
    from det_suite.ops.bi_launch_spec import pdl_launch
    from det_suite.ops.launch import programmatic_launch, split_k_counters

    fold_kernel = _fold_kernel()
    pending = []
    launches = [] if launches is None else launches

    def launcher(kernel, call, args, keywords):
        if call.kernel == SPLIT_KERNEL:
            pending.append((call.grid, args, keywords))  # launched with the combine's output
            return None
        if call.kernel != COMBINE_KERNEL:
            return kernel[call.grid](*args, **keywords)
        grid, split_args, split_keywords = pending.pop()
        named = dict(zip((name for name, _ in call.args), args))
        rows, groups, _segments = grid
        device = named["q_ptr"].device
        counters = split_k_counters(device, rows * groups)
        outputs = [named[name] for name in ("out_ptr", "out_scale_ptr", "stride_ot",
                                            "stride_oh")]
        # Where the ops launch plainly (the interpreter, a GPU before SM90), so does the arm.
        pdl_constexprs, pdl_options = pdl_launch(pdl and programmatic_launch(device))
        launches.append(fold_kernel.__name__)
        return fold_kernel[grid](*split_args, counters, *outputs, **split_keywords,
                                 QUANTIZE_OUT=keywords["QUANTIZE_OUT"],
                                 FP8_MAX=keywords["FP8_MAX"], **dict(pdl_constexprs),
                                 **dict(pdl_options))
    launcher.launches = launches
    return launcher


def arm_launcher(arm: str):
    """A `paged_attention` launcher that launches the split kernel as `arm` says and every
    other kernel as the op does."""
    if arm not in ALL_ARMS:
        raise ValueError(f"arm must be one of {', '.join(ALL_ARMS)}; got {arm!r}")
    if arm in FOLD_ARMS:
        return fold_launcher(FOLD_ARMS[arm])
    options = ARMS.get(arm, {})

    def launcher(kernel, call, args, keywords):
        if call.kernel != SPLIT_KERNEL:
            return kernel[call.grid](*args, **keywords)
        rows, programs, segments = call.grid
        heads = options.get("HEADS", keywords["HEADS"])
        grid = (rows, programs * keywords["HEADS"] // heads, segments)
        return kernel[grid](*args, **{**keywords, **options})
    return launcher


class DecodeCall:
    """One decode call of `paged_attention`: `batch` requests, each `prefix` keys in a
    NaN-filled paged cache (pages scattered), one new query each. The block tables are
    `max_seq_len` keys wide (at least the context); entries past a request's pages name
    page 0 and are never read."""

    def __init__(self, prefix: int, batch: int, heads, device, seed: int = 0,
                 max_seq_len: int = 0):
        hq, hkv, d = heads
        g = torch.Generator().manual_seed(seed)
        pages = -(-(prefix + 1) // PAGE)
        width = max(pages, -(-max_seq_len // PAGE))
        self.k = torch.full((batch * pages, PAGE, hkv, d), float("nan"), dtype=torch.bfloat16,
                            device=device)
        self.v = torch.full_like(self.k, float("nan"))
        perm = torch.randperm(batch * pages, generator=g).view(batch, pages)
        tables = torch.zeros(batch, width, dtype=torch.int32)
        tables[:, :pages] = perm
        self.tables = tables.to(device)
        for r in range(batch):
            k, v = (torch.randn(prefix + 1, hkv, d, generator=g).to(torch.bfloat16).to(device)
                    for _ in range(2))
            pos = torch.arange(prefix + 1, device=device)
            slots = self.tables[r, pos // PAGE].long() * PAGE + pos % PAGE
            write_kv(k, v, self.k, self.v, slots)
        self.q = torch.randn(batch, hq, d, generator=g).to(torch.bfloat16).to(device)
        self.context = torch.full((batch,), prefix, dtype=torch.int32, device=device)
        self.starts = torch.arange(batch + 1, dtype=torch.int32, device=device)
        self.scale = d ** -0.5

    def run(self, launcher) -> torch.Tensor:
        return paged_attention(self.q, self.k, self.v, self.tables, self.context, self.starts,
                               self.scale, launcher=launcher)

    def prefill_rows(self) -> torch.Tensor:
        """Each request's query as the last row of a prefill of its whole context (the tile
        kernel, context 0, every position a query): what its decode row must equal."""
        batch, hq, d = self.q.shape
        prefix = int(self.context[0])
        g = torch.Generator().manual_seed(1)
        rows = []
        for r in range(batch):
            earlier = torch.randn(prefix, hq, d, generator=g).to(torch.bfloat16)
            q = torch.cat([earlier.to(self.q.device), self.q[r:r + 1]])
            out = paged_attention(q, self.k, self.v, self.tables[r:r + 1],
                                  torch.zeros(1, dtype=torch.int32, device=q.device),
                                  torch.tensor([0, prefix + 1], dtype=torch.int32,
                                               device=q.device), self.scale)
            rows.append(out[-1])
        return torch.stack(rows)


def compare_arms(call: DecodeCall, arms) -> dict[str, dict]:
    """Per arm: whether its output equals its reference (torch.equal) and how many
    elements differ. The reference is the shipped arm's output (which runs again when
    listed: a run-to-run check), for a segment arm the prefill's rows at its segment; a
    segment arm also records whether it differs from the shipped bits (`changed`) and
    whether it must (`must_change`: the context is longer than its segment)."""
    shipped = call.run(arm_launcher("shipped"))
    result = {}
    for arm in arms:
        with segment_tiles(SEGMENT_ARMS.get(arm)):
            out = call.run(arm_launcher(arm))
            reference = call.prefill_rows() if arm in SEGMENT_ARMS else shipped
        result[arm] = {"equal": bool(torch.equal(out, reference)),
                       "differing_elements": int((out != reference).sum())}
        if arm in SEGMENT_ARMS:
            # Only a context longer than the arm's segment is cut differently.
            result[arm]["changed"] = not torch.equal(out, shipped)
            result[arm]["must_change"] = int(call.context.max()) + 1 > SEGMENT_ARMS[arm]
    return result


def _time(call: DecodeCall, arm: str) -> dict[str, float]:
    from det_suite.bench.timing import flushed_median_us, graph_median_us

    launcher = arm_launcher(arm)
    with segment_tiles(SEGMENT_ARMS.get(arm)):
        return {"graph_us": graph_median_us(lambda: call.run(launcher)),
                "flushed_us": flushed_median_us(lambda: call.run(launcher))}


def _positive(text: str) -> int:
    values = int_list(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"expected one integer >= 1; got {text!r}")
    return values[0]


def _arms(text: str) -> list[str]:
    arms = text.split(",")
    unknown = [a for a in arms if a not in ALL_ARMS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown arm(s) {', '.join(unknown)}; "
                                         f"choose from {', '.join(ALL_ARMS)}")
    return arms


def _markdown(payload: dict) -> str:
    h = payload["heads"]
    lines = [f"# Decode attention sweep ({payload['device']})", "",
             f"{h['query']} query / {h['kv']} KV heads, head_dim {h['head_dim']}, page {PAGE}, "
             f"SEGMENT {ATTENTION_TILE['SEGMENT']}, "
             f"BLOCK_KV {ATTENTION_TILE['BLOCK_KV']}, block tables {payload['max_seq_len']} "
             "keys wide. Times: the whole op (split + combine) "
             "per call, median; x36: a Qwen3-8B decode step's 36 layers.", "",
             "Same bits: against the shipped arm; a segment arm against the prefill of the "
             "same queries at its segment (and it must differ from the shipped bits).", "",
             "| prefix | batch | arm | same bits | graph us (x36) | flushed us |",
             "| --- | --- | --- | --- | --- | --- |"]
    for cell in payload["cells"]:
        for arm, row in cell["arms"].items():
            same = same_bits(row) + (" but **unchanged from shipped**"
                                     if row.get("must_change") and not row["changed"] else "")
            t = row.get("time")
            timing = (f"{t['graph_us']:.2f} ({36 * t['graph_us']:.0f}) | {t['flushed_us']:.2f}"
                      if t else "not timed | not timed")
            lines.append(f"| {cell['prefix']} | {cell['batch']} | {arm} | {same} | {timing} |")
    lines += ["", control_verdict(CONTROL, payload["control_flagged"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--prefix", type=int_list, default=None,
                        help="keys before the query (default 128,2048 on a GPU, 40,300 on CPU)")
    parser.add_argument("--batch", type=int_list, default=None,
                        help="requests per call (default 1,4 on a GPU, 2 on CPU)")
    parser.add_argument("--arms", type=_arms, default=list(ALL_ARMS))
    parser.add_argument("--max-seq-len", type=_positive, default=None,
                        help="block table width in keys (default 2080, bench e2e's tables for "
                             "its seed cells; on CPU the context's own pages)")
    add_device_option(parser)
    args = parser.parse_args(argv)
    gpu = wants_gpu(parser, args)
    heads = QWEN3_8B_HEADS if gpu else CPU_HEADS
    prefixes = args.prefix or ([128, 2048] if gpu else [40, 300])
    batches = args.batch or ([1, 4] if gpu else [2])
    arms = list(dict.fromkeys(["shipped", *args.arms, CONTROL]))
    max_seq_len = args.max_seq_len or (2080 if gpu else 0)
    cells = []
    for prefix in prefixes:
        for batch in batches:
            call = DecodeCall(prefix, batch, heads, args.device, max_seq_len=max_seq_len)
            rows = compare_arms(call, arms)
            for arm in arms:
                if gpu and arm != CONTROL:
                    rows[arm]["time"] = _time(call, arm)
                same = "same bits" if rows[arm]["equal"] else "DIFFERENT bits"
                timing = rows[arm].get("time", {}).get("graph_us")
                print(f"prefix {prefix} batch {batch} {arm}: {same}"
                      + (f", {timing:.2f} us" if timing is not None else ""), flush=True)
            cells.append({"prefix": prefix, "batch": batch, "arms": rows})
    payload = {
        "kind": "attention-decode-sweep", "device": (torch.cuda.get_device_name() if gpu
                                                     else "cpu (Triton interpreter)"),
        "torch": torch.__version__, "triton": triton.__version__,
        "heads": dict(zip(("query", "kv", "head_dim"), heads)), "max_seq_len": max_seq_len,
        # A segment arm that kept the shipped bits where its segment cuts the context did
        # not change the segment: its check proved nothing.
        "control_flagged": all(not c["arms"][CONTROL]["equal"]
                               and all(row["changed"] for row in c["arms"].values()
                                       if row.get("must_change"))
                               for c in cells),
        "candidates_equal": all(row["equal"] for c in cells for arm, row in c["arms"].items()
                                if arm != CONTROL),
        "cells": cells,
    }
    return finish(args.out_dir, "attention_sweep", payload, _markdown(payload),
                  candidates="a candidate arm")


if __name__ == "__main__":
    raise SystemExit(main())
