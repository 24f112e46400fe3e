"""Which launch of the decode attention is fastest with the shipped bits (issue 15, H200).

Evidence h's per-kernel profile (docs/decode-step-kernels.md, "Where the step goes now") has
the batch-1 decode attention at 8 us a layer at prefix 128 and 19 us at prefix 2048, where its
K/V bytes take ~2 us to read: each split-shape program walks its segment's BLOCK_KV tiles as
a chain of dependent loads and MMAs, and the GROUP query heads of a KV head each read that
head's K/V again. What helps is a measurement, and every candidate must give the shipped bits
(a query row's reduction order is the op's contract: the same bits as a prefill of the row).
This runs the arms below through `paged_attention`'s `launcher` seam, so the op, its launch
spec and the combine kernel are the shipped ones; only the split kernel's launch changes:

- shipped:         the split kernel as the op launches it
- stages-1/3/4:    its software pipeline 1, 3 or 4 stages deep (the shipped tile has 2): more
                   of a segment's K/V tiles in flight while the softmax chain runs
- warps-8:         eight warps instead of four (more threads issuing the paged gathers)
- gqa-packed:      `gqa_packed_split_kernel` below: one program per (row, KV head, segment)
                   puts the KV head's GROUP query heads in rows 0..GROUP-1 of the MMA tile
                   (the shipped kernel puts one query head in row 0 and zeros elsewhere), so a
                   KV head's tiles are read once, not GROUP times, by GROUP times fewer programs
- gqa-packed+stages-3/4: both

Why packing cannot change the bits: a row of `tl.dot`'s output depends on that row of its
first operand only (what makes any GEMM row-invariant, and what the FP8 kernel's invariance
matrix re-proves for wgmma every run); each row keeps its own max, sum and accumulator in
`attend_segment`; and all GROUP heads of a decode row share one position, so one mask. The
sweep checks it anyway, against the shipped arm, bit for bit (torch.equal, per cell), and a
positive control arm (BLOCK_KV 32: another tile order inside a segment) must differ.

Per arm and cell (prefix x batch, Qwen3-8B heads: 32 query, 8 KV, head_dim 128, page 16):
the op's time per call with CUDA Graph replay (L2 warm) and with L2 flushed before each call
(a decode step's layers evict each other's K/V), and whether its output equals the shipped
arm's. On a CPU (`--device cpu`, Triton's interpreter) it checks the bits only, at small
heads and contexts: the unit test runs that.

Developer tool: writes attention_sweep.json and attention_sweep.md into OUT_DIR.
    python tools/attention_decode_sweep.py OUT_DIR [--prefix 128,2048] [--batch 1,4]
        [--arms shipped,gqa-packed,...] [--device cuda|cpu]
A winning arm moves into det_suite (the packed kernel into kernels/, stages or warps into
ATTENTION_SPLIT_TILE) with an H200 evidence run: both are result dependencies.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _cpu_requested(argv) -> bool:
    return "--device=cpu" in argv or any(a == "--device" and b == "cpu"
                                         for a, b in zip(argv, argv[1:]))


if __name__ == "__main__" and _cpu_requested(sys.argv[1:]):
    # The interpreter must be chosen before Triton is imported (platform/interpreter.py).
    from det_suite.platform.interpreter import use_interpreter
    use_interpreter()

import torch  # noqa: E402 - after the interpreter switch
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from det_suite.kernels.bi_attention_segment import attend_segment, request_of_row  # noqa: E402
from det_suite.ops.batch_invariant import ATTENTION_TILE, paged_attention, write_kv  # noqa: E402
from det_suite.reports.files import write_json_atomic, write_text_atomic  # noqa: E402

SPLIT_KERNEL = "bi_paged_attention_split_kernel"
QWEN3_8B_HEADS = (32, 8, 128)   # query heads, KV heads, head_dim
CPU_HEADS = (4, 2, 16)
PAGE = 16
# Arm -> (pack the GQA group, launch options of the split kernel).
ARMS = {
    "shipped": (False, {}),
    "stages-1": (False, {"num_stages": 1}),
    "stages-3": (False, {"num_stages": 3}),
    "stages-4": (False, {"num_stages": 4}),
    "warps-8": (False, {"num_warps": 8}),
    "gqa-packed": (True, {}),
    "gqa-packed+stages-3": (True, {"num_stages": 3}),
    "gqa-packed+stages-4": (True, {"num_stages": 4}),
    "control-block-kv-32": (False, {"BLOCK_KV": 32}),
}
CONTROL = "control-block-kv-32"   # must differ: the harness can see a changed order


@triton.jit
def gqa_packed_split_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr,
    block_tables_ptr, context_lens_ptr, query_starts_ptr,
    scale,
    num_requests, block_size,
    stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_bt,
    seg_stats_ptr, seg_acc_ptr,
    stride_st, stride_sh, stride_ss,
    stride_at, stride_ah, stride_as,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr,
    SEGMENT: tl.constexpr,
):
    """`bi_paged_attention_split_kernel`'s parameters and workspace, one program per
    (query row, KV head, segment): the KV head's GROUP query heads in the tile's first rows."""
    tl.static_assert(GROUP <= BLOCK_Q)
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    segment = tl.program_id(2)

    request = request_of_row(query_starts_ptr, row, num_requests)
    q_first = tl.load(query_starts_ptr + request)
    q_len = tl.load(query_starts_ptr + request + 1) - q_first
    context = tl.load(context_lens_ptr + request)
    kv_len = context + q_len
    position = context + row - q_first
    seg_start = segment * SEGMENT
    if seg_start > position:
        return

    offs_q = tl.arange(0, BLOCK_Q)
    row_is_head = offs_q < GROUP
    head = kv_head * GROUP + offs_q
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + row.to(tl.int64) * stride_qt + head[:, None] * stride_qh
                + offs_d[None, :], mask=row_is_head[:, None], other=0.0)
    positions = position + offs_q * 0
    block_table = block_tables_ptr + request.to(tl.int64) * stride_bt
    seg_max, seg_sum, seg_acc = attend_segment(
        q, positions, seg_start, tl.minimum(position + 1, seg_start + SEGMENT), kv_len, scale,
        k_cache_ptr, v_cache_ptr, block_table, kv_head, block_size,
        stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        BLOCK_Q, BLOCK_KV, HEAD_DIM, SEGMENT)

    stats = seg_stats_ptr + row.to(tl.int64) * stride_st + head * stride_sh + segment * stride_ss
    tl.store(stats, seg_max, mask=row_is_head)
    tl.store(stats + 1, seg_sum, mask=row_is_head)
    acc_rows = (seg_acc_ptr + row.to(tl.int64) * stride_at + head[:, None] * stride_ah
                + segment * stride_as + offs_d[None, :])
    tl.store(acc_rows, seg_acc, mask=row_is_head[:, None])


def arm_launcher(arm: str):
    """A `paged_attention` launcher that launches the split kernel as `arm` says and every
    other kernel as the op does."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {', '.join(ARMS)}; got {arm!r}")
    pack, options = ARMS[arm]

    def launcher(kernel, call, args, keywords):
        if call.kernel != SPLIT_KERNEL:
            return kernel[call.grid](*args, **keywords)
        keywords = {**keywords, **options}
        if pack:
            rows, heads, segments = call.grid
            return gqa_packed_split_kernel[(rows, heads // keywords["GROUP"], segments)](
                *args, **keywords)
        return kernel[call.grid](*args, **keywords)
    return launcher


class DecodeCall:
    """One decode call of `paged_attention`: `batch` requests, each `prefix` keys in a
    NaN-filled paged cache (pages scattered), one new query each."""

    def __init__(self, prefix: int, batch: int, heads, device, seed: int = 0):
        hq, hkv, d = heads
        g = torch.Generator().manual_seed(seed)
        pages = -(-(prefix + 1) // PAGE)
        self.k = torch.full((batch * pages, PAGE, hkv, d), float("nan"), dtype=torch.bfloat16,
                            device=device)
        self.v = torch.full_like(self.k, float("nan"))
        perm = torch.randperm(batch * pages, generator=g)
        self.tables = perm.view(batch, pages).to(torch.int32).to(device)
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


def compare_arms(call: DecodeCall, arms) -> dict[str, dict]:
    """Per arm: whether its output equals the shipped arm's (torch.equal) and how many
    elements differ. The shipped arm, when listed, runs again: a run-to-run check."""
    shipped = call.run(arm_launcher("shipped"))
    result = {}
    for arm in arms:
        out = call.run(arm_launcher(arm))
        result[arm] = {"equal": bool(torch.equal(out, shipped)),
                       "differing_elements": int((out != shipped).sum())}
    return result


def _time(call: DecodeCall, arm: str) -> dict[str, float]:
    from det_suite.bench.timing import flushed_median_us, graph_median_us

    launcher = arm_launcher(arm)
    return {"graph_us": graph_median_us(lambda: call.run(launcher)),
            "flushed_us": flushed_median_us(lambda: call.run(launcher))}


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers; got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1; got {text!r}")
    return values


def _arms(text: str) -> list[str]:
    arms = text.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown arm(s) {', '.join(unknown)}; "
                                         f"choose from {', '.join(ARMS)}")
    return arms


def _markdown(payload: dict) -> str:
    h = payload["heads"]
    lines = [f"# Decode attention sweep ({payload['device']})", "",
             f"{h['query']} query / {h['kv']} KV heads, head_dim {h['head_dim']}, page {PAGE}, "
             f"SEGMENT {ATTENTION_TILE['SEGMENT']}, "
             f"BLOCK_KV {ATTENTION_TILE['BLOCK_KV']}. Times: the whole op (split + combine) "
             "per call, median; x36: a Qwen3-8B decode step's 36 layers.", "",
             "| prefix | batch | arm | same bits as shipped | graph us (x36) | flushed us |",
             "| --- | --- | --- | --- | --- | --- |"]
    for cell in payload["cells"]:
        for arm, row in cell["arms"].items():
            same = "yes" if row["equal"] else f"NO ({row['differing_elements']} elements)"
            t = row.get("time")
            timing = (f"{t['graph_us']:.2f} ({36 * t['graph_us']:.0f}) | {t['flushed_us']:.2f}"
                      if t else "not timed | not timed")
            lines.append(f"| {cell['prefix']} | {cell['batch']} | {arm} | {same} | {timing} |")
    lines += ["", f"Control arm `{CONTROL}` must differ: "
              + ("it did in every cell." if payload["control_flagged"] else
                 "**it did not in some cell: the comparison is not to be trusted.**")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--prefix", type=_ints, default=None,
                        help="keys before the query (default 128,2048 on a GPU, 40,300 on CPU)")
    parser.add_argument("--batch", type=_ints, default=None,
                        help="requests per call (default 1,4 on a GPU, 2 on CPU)")
    parser.add_argument("--arms", type=_arms, default=list(ARMS))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args(argv)
    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (use --device cpu for the bit check)")
    heads = QWEN3_8B_HEADS if gpu else CPU_HEADS
    prefixes = args.prefix or ([128, 2048] if gpu else [40, 300])
    batches = args.batch or ([1, 4] if gpu else [2])
    arms = list(dict.fromkeys(["shipped", *args.arms, CONTROL]))
    cells = []
    for prefix in prefixes:
        for batch in batches:
            call = DecodeCall(prefix, batch, heads, args.device)
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
        "heads": dict(zip(("query", "kv", "head_dim"), heads)),
        "control_flagged": all(not c["arms"][CONTROL]["equal"] for c in cells),
        "candidates_equal": all(row["equal"] for c in cells for arm, row in c["arms"].items()
                                if arm != CONTROL),
        "cells": cells,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out_dir / "attention_sweep.json", payload)
    write_text_atomic(args.out_dir / "attention_sweep.md", _markdown(payload))
    print(f"wrote {args.out_dir / 'attention_sweep.json'} and attention_sweep.md")
    ok = payload["control_flagged"] and payload["candidates_equal"]
    if not ok:
        print("FAILED: " + ("the control was not flagged; " if not payload["control_flagged"]
                            else "") + ("a candidate changed the bits"
                                        if not payload["candidates_equal"] else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
