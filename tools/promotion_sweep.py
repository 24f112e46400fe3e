"""Tile sweep with FP32 promotion on (issue 10, H200): which tiles win once the MMA promotes
its partial sums every PROMOTE_K elements of K, for PROMOTE_K 128 (BLOCK_K 128 or 256) and
256 (BLOCK_K 256), against torch._scaled_mm in one process, CUDA Graph mode (L2 warm).

Promotion keeps a second fp32 accumulator in registers and waits for each warpgroup's MMAs
at every promotion point, so the tiles tuned without it (one warpgroup on 128 x 128, 4
stages) are no longer the right ones: this prices tiles with two warpgroups, half the
promotion points, and split-K on decode grids. Developer tool; the shipped decision is in
policy/tiles.py and policy/tables/sm90.json.

Within one (PROMOTE_K, SPLIT_K) every tile must give the same bits (that is the invariance
rule): the sweep compares each output to the first and counts differences.

Usage: python tools/promotion_sweep.py OUT.jsonl [--set named|unnamed|all] [--ms 1,16,...]
"""

import argparse
import itertools
import json
import math
import sys
import time

import torch

from det_suite.bench.gemm.results import weight_floor_us
from det_suite.bench.timing import copy_bandwidth, graph_median_us
from det_suite.models.catalog import projections
from det_suite.ops import launch_fp8_gemm
from det_suite.policy import LaunchConfig
from det_suite.policy.generic import split_for
from det_suite.tune import GemmLaunch, precompile_launches

NAMED = [(p.n, p.k) for p in projections("qwen3-8b")]
UNNAMED = [(4096, 14336), (28672, 4096), (10240, 8192), (8192, 28672), (5120, 4096),
           (5120, 8192), (2560, 9728), (2560, 4096)]
# (promote_k, block_k): the two ways to promote every 128, and every 256.
REGIMES = ((128, 128), (128, 256), (256, 256))
CALLS = 16


def ints(text):
    return tuple(int(v) for v in text.split(","))


def tiles_for(m, block_k):
    """(block_m, block_n, warps, stages, swap) worth timing at M rows."""
    deep = (4, 6, 8) if block_k == 128 else (3, 4, 6)
    shallow = (3, 4) if block_k == 128 else (2, 3)
    if m <= 32:
        bm = 16 if m <= 16 else 32
        out = [(bm, bn, 4, st, True) for bn in (64, 128) for st in deep]
        out += [(64, 64, 4, shallow[-1], False)]
        return out
    if m <= 128:
        return ([(64, bn, 4, st, False) for bn in (64, 128) for st in deep]
                + [(128, 128, 8, st, False) for st in shallow]
                + [(64, 256, 8, st, False) for st in shallow]
                + [(128, 256, 8, shallow[0], False)])
    return ([(128, 128, 8, st, False) for st in shallow]
            + [(128, 256, 8, st, False) for st in shallow]
            + [(64, 128, 4, st, False) for st in shallow]
            + [(64, 256, 8, st, False) for st in shallow]
            + [(256, 128, 8, shallow[0], False)]
            + [(128, 128, 4, shallow[0], False)])


def configs_for(m, split, promote_k, block_k):
    for bm, bn, w, st, swap in tiles_for(m, block_k):
        yield LaunchConfig(block_m=bm, block_n=bn, block_k=block_k, num_warps=w, num_stages=st,
                           split_k=split, group_m=8, use_workspace=split > 1 and m <= 128,
                           use_tma=True, fused_fixup=True, swap_ab=swap, promote_k=promote_k)


def tag(c):
    return (f"bm{c.block_m} bn{c.block_n} bk{c.block_k} p{c.promote_k} sk{c.split_k} "
            f"w{c.num_warps} s{c.num_stages}{' ws' if c.use_workspace else ''}"
            f"{' swap' if c.swap_ab else ''}")


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--set", choices=("named", "unnamed", "all"), default="all")
    p.add_argument("--ms", type=ints, default=(1, 16, 32, 128, 512, 2048, 8192))
    p.add_argument("--regimes", default="128/128,128/256,256/256")
    args = p.parse_args(argv)
    regimes = [tuple(int(v) for v in r.split("/")) for r in args.regimes.split(",")]
    shapes = {"named": NAMED, "unnamed": UNNAMED, "all": NAMED + UNNAMED}[args.set]
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    bw = copy_bandwidth()
    sa = torch.tensor([0.02], device=dev)
    sw = torch.tensor([0.01], device=dev)
    out_file = open(args.out, "w")
    t0 = time.time()
    best = {}  # (n, k, m, promote_k, split) -> (ratio, tag)
    for n, k in shapes:
        w = (torch.randn(n, k, device=dev) * 0.05).to(torch.float8_e4m3fn)
        generic_split = split_for(n, k, sms)
        splits = sorted({1, generic_split} | ({2} if k >= 8192 and generic_split == 1 else set()))
        acts = {}
        for m in args.ms:
            a = torch.randn(m, k, device=dev) * 8
            a[:, 0::97] = 448.0
            a[:, 1::97] = -448.0
            acts[m] = a.to(torch.float8_e4m3fn)
        # Promoting every 128 inside a BLOCK_K 256 dot only changes the loop length: priced
        # where loop overhead shows (decode rows).
        plan = [(m, cfg) for m in args.ms for split in splits for pk, bk in regimes
                if not (pk == 128 and bk == 256 and m > 32)
                for cfg in configs_for(m, split, pk, bk)]
        outs = {m: torch.empty(m, n, dtype=torch.bfloat16, device=dev) for m in args.ms}
        precompile_launches([GemmLaunch(acts[m], w.t(), sa, sw, outs[m], c) for m, c in plan])
        print(f"{n}x{k}: {len(plan)} configs compiled [{time.time() - t0:.0f}s]", flush=True)
        floor = weight_floor_us(n, k, bw)
        for m in args.ms:
            a, out = acts[m], outs[m]
            t_ref = graph_median_us(lambda: torch._scaled_mm(
                a, w.t(), scale_a=sa.reshape(()), scale_b=sw.reshape(()),
                out_dtype=torch.bfloat16), calls_per_graph=CALLS, warmup_ms=2, rep_ms=10)
            first_bits = {}
            compared = differ = 0
            for cfg in (c for mm, c in plan if mm == m):
                try:
                    launch_fp8_gemm(a, w.t(), sa, sw, None, out, cfg)
                    key = (cfg.promote_k, cfg.split_k)
                    if key in first_bits:
                        compared += 1
                        if not torch.equal(out, first_bits[key]):
                            differ += 1
                            print("BITS-DIFFER", n, k, m, tag(cfg), flush=True)
                    else:
                        first_bits[key] = out.clone()
                    t = graph_median_us(lambda: launch_fp8_gemm(a, w.t(), sa, sw, None, out, cfg),
                                        calls_per_graph=CALLS, warmup_ms=2, rep_ms=10)
                except Exception as exc:  # noqa: BLE001 - resource limits of big tiles
                    print("FAIL", n, k, m, tag(cfg), type(exc).__name__, str(exc)[:120], flush=True)
                    continue
                row = dict(n=n, k=k, m=m, det_us=t, ref_us=t_ref, ratio=t / t_ref,
                           floor_x=t / floor, config=cfg.__dict__, tag=tag(cfg))
                out_file.write(json.dumps(row) + "\n")
                bkey = (n, k, m, cfg.promote_k, cfg.split_k)
                if bkey not in best or t / t_ref < best[bkey][0]:
                    best[bkey] = (t / t_ref, tag(cfg), t / floor)
            out_file.flush()
            line = "  ".join(f"p{pk}/s{s}={best[(n, k, m, pk, s)][0]:.2f}"
                             for pk in sorted({r[0] for r in regimes}) for s in splits
                             if (n, k, m, pk, s) in best)
            print(f"{n}x{k} m={m} ref={t_ref:.1f}us {line} bits {compared} compared "
                  f"{differ} differ [{time.time() - t0:.0f}s]", flush=True)
    out_file.close()
    # Summary: per promote_k, the best split per shape (one split serves every M), then the
    # geomean and worst cell of the best tile per M.
    for pk in sorted({r[0] for r in regimes}):
        for label, group in (("named", NAMED), ("unnamed", UNNAMED)):
            cells = []
            for n, k in (s for s in shapes if s in group):
                per_split = {}
                for (bn, bk, m, p, s), (r, t, fx) in best.items():
                    if (bn, bk, p) == (n, k, pk):
                        per_split.setdefault(s, []).append((r, m, t, fx))
                if not per_split:
                    continue
                s_best = min(per_split, key=lambda s: sum(math.log(r) for r, *_ in per_split[s]))
                cells += [(r, n, k, m, s_best, t, fx) for r, m, t, fx in per_split[s_best]]
            if cells:
                geo = math.exp(sum(math.log(c[0]) for c in cells) / len(cells))
                worst = max(cells)
                print(f"SUMMARY promote {pk} {label}: geomean {geo:.3f} over {len(cells)}, worst "
                      f"{worst[0]:.2f} at {worst[1]}x{worst[2]} m={worst[3]}", flush=True)
                for c in sorted(cells, key=lambda c: (c[1], c[2], c[3])):
                    print(f"  {c[1]}x{c[2]} m={c[3]} r={c[0]:.3f} floor={c[6]:.2f} {c[5]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
