"""Exploratory sweep of FP8 GEMM launch configs against torch._scaled_mm on one GPU.

Developer tool (the supported path is `det-suite tune`). Times GPU work only: each call is
captured 16 times into a CUDA graph, rotating among weight copies that together exceed
L2, and the replay time is divided by 16 (so Python launch overhead and a warm L2 are both
out of the numbers, for both arms). Prints per shape, split-K count and M the best config
and its ratio to torch._scaled_mm; writes JSON.
Usage: python tools/sweep_fp8_configs.py OUT.json [N,K ...]
"""

import itertools
import json
import math
import sys
import time

import torch

from det_suite.bench.timing import graph_median_us
from det_suite.ops import fp8_scaled_mm
from det_suite.policy import LaunchConfig

SHAPES = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]
MS = [1, 8, 32, 128, 512, 2048, 8192]
SPLITS = (1, 2, 4, 8)
CALLS_PER_GRAPH = 16


def graph_time_ms(fn_for_copy, copies):
    """CUDA-graph time of one call, the captured calls cycling through the weight copies."""
    rotation = itertools.cycle(range(copies))
    us = graph_median_us(lambda: fn_for_copy(next(rotation)),
                         calls_per_graph=CALLS_PER_GRAPH, warmup_ms=5, rep_ms=25)
    return us / 1e3


def candidates(m, split):
    if m <= 32:
        grid = [(64, bn, 4, st, tma) for bn in (64, 128) for st in (4, 6) for tma in (False, True)]
    elif m <= 128:
        grid = [(64, 64, 4, 4, True), (64, 128, 4, 4, True), (128, 64, 4, 4, True),
                (128, 128, 4, 4, True), (128, 128, 8, 4, True)]
    else:
        grid = [(bm, bn, w, st, tma) for bm, bn, w in ((64, 128, 4), (128, 128, 4),
                                                       (128, 128, 8), (128, 256, 8))
                for st in (3, 4) for tma in (False, True)]
    for bm, bn, warps, stages, tma in grid:
        yield LaunchConfig(block_m=bm, block_n=bn, block_k=128, num_warps=warps,
                           num_stages=stages, split_k=split, group_m=8,
                           use_workspace=split > 1 and m <= 128, use_tma=tma,
                           fused_fixup=True)


def main():
    out_path = sys.argv[1]
    shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[2:]] or SHAPES
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    results = []
    for n, k in shapes:
        copies = max(2, math.ceil(2 * l2 / (n * k)))
        ws = [(torch.randn(n, k, device="cuda") * 0.05).to(torch.float8_e4m3fn)
              for _ in range(copies)]
        w_scale = torch.tensor([0.01], device="cuda")
        x_scale = torch.tensor([0.02], device="cuda")
        for m in MS:
            a = (torch.randn(m, k, device="cuda") * 8).to(torch.float8_e4m3fn)

            def ref_call(i):
                return torch._scaled_mm(a, ws[i].t(), scale_a=x_scale.reshape(()),
                                        scale_b=w_scale.reshape(()), out_dtype=torch.bfloat16)
            t_ref = graph_time_ms(ref_call, copies)
            ref = ref_call(0).float()
            for split in SPLITS:
                if split > k // 128:
                    continue
                best = None
                for cfg in candidates(m, split):
                    def det_call(i, cfg=cfg):
                        return fp8_scaled_mm(a, ws[i], x_scale, w_scale, config=cfg)
                    try:
                        err = ((det_call(0).float() - ref).norm() / ref.norm()).item()
                        if not err < 1e-2:
                            print("WRONG", n, k, m, cfg, err, flush=True)
                            continue
                        t = graph_time_ms(det_call, copies)
                    except Exception as exc:  # resource limits on big tiles
                        print("FAIL", n, k, m, cfg, type(exc).__name__, str(exc)[:120], flush=True)
                        continue
                    if best is None or t < best[0]:
                        best = (t, cfg)
                if best is None:
                    continue
                results.append(dict(n=n, k=k, m=m, split_k=split, det_ms=best[0], ref_ms=t_ref,
                                    ratio=best[0] / t_ref, config=best[1].__dict__))
                c = best[1]
                print(f"{n}x{k} m={m} s={split} det={best[0]*1e3:.1f}us ref={t_ref*1e3:.1f}us "
                      f"r={best[0]/t_ref:.2f} bm{c.block_m} bn{c.block_n} w{c.num_warps} "
                      f"st{c.num_stages} tma{int(c.use_tma)} ws{int(c.use_workspace)}", flush=True)
        with open(out_path, "w") as fh:
            json.dump(results, fh, indent=1)
    for n, k in shapes:
        rows = [r for r in results if (r["n"], r["k"]) == (n, k)]
        for split in sorted({r["split_k"] for r in rows}):
            sel = [r for r in rows if r["split_k"] == split]
            if len(sel) == len(MS):
                g = math.exp(sum(math.log(r["ratio"]) for r in sel) / len(sel))
                print(f"SUMMARY {n}x{k} split={split} geomean={g:.3f} "
                      + " ".join(f"{r['ratio']:.2f}" for r in sel))


if __name__ == "__main__":
    t0 = time.time()
    main()
    print("elapsed", time.time() - t0)
