"""Exploratory sweep of FP8 GEMM launch configs against torch._scaled_mm on one GPU.

Developer tool (the supported path is `det-suite tune`): prints, per shape and split-K
count, the best config per M and the time ratio to torch._scaled_mm, and writes JSON.
Usage: python tools/sweep_fp8_configs.py OUT.json [N,K ...]
"""

import itertools
import json
import math
import sys
import time

import torch
import triton

from det_suite.ops import fp8_scaled_mm
from det_suite.policy import LaunchConfig

SHAPES = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]
MS = [1, 8, 32, 128, 512, 2048, 8192]
SPLITS = (1, 2, 4, 8)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")


def candidates(m, k, split):
    tiles_k = k // 128
    if split > tiles_k:
        return []
    if m <= 32:
        grid = itertools.product([64], [64, 128], [4], [4, 6], [True])
    elif m <= 128:
        grid = itertools.product([64, 128], [64, 128, 256], [4, 8], [4], [split > 1])
    else:
        grid = itertools.product([128], [128, 256], [4, 8], [3, 4], [False])
    out = []
    for bm, bn, warps, stages, ws in grid:
        if bm == 128 and bn == 256 and warps == 4:
            continue  # accumulator would spill
        out.append(LaunchConfig(block_m=bm, block_n=bn, block_k=128, num_warps=warps,
                                num_stages=stages, split_k=split, group_m=8,
                                use_workspace=ws and split > 1))
    return out


def main():
    out_path = sys.argv[1]
    shapes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[2:]] or SHAPES
    results = []
    for n, k in shapes:
        w = (torch.randn(n, k, device="cuda") * 0.05).to(torch.float8_e4m3fn)
        ws = torch.tensor([0.01], device="cuda")
        xs = torch.tensor([0.02], device="cuda")
        for m in MS:
            a = (torch.randn(m, k, device="cuda") * 8).to(torch.float8_e4m3fn)
            t_ref = bench(lambda: torch._scaled_mm(a, w.t(), scale_a=xs.reshape(()),
                                                   scale_b=ws.reshape(()),
                                                   out_dtype=torch.bfloat16))
            ref = torch._scaled_mm(a, w.t(), scale_a=xs.reshape(()), scale_b=ws.reshape(()),
                                   out_dtype=torch.bfloat16).float()
            for split in SPLITS:
                best = None
                for cfg in candidates(m, k, split):
                    try:
                        y = fp8_scaled_mm(a, w, xs, ws, config=cfg)
                        err = ((y.float() - ref).norm() / ref.norm()).item()
                        if not err < 1e-2:
                            print("WRONG", n, k, m, cfg, err, flush=True)
                            continue
                        t = bench(lambda: fp8_scaled_mm(a, w, xs, ws, config=cfg))
                    except Exception as exc:  # resource limits on big tiles
                        print("FAIL", n, k, m, cfg, type(exc).__name__, str(exc)[:120], flush=True)
                        continue
                    if best is None or t < best[0]:
                        best = (t, cfg)
                if best is None:
                    continue
                results.append(dict(n=n, k=k, m=m, split_k=split, det_ms=best[0], ref_ms=t_ref,
                                    ratio=best[0] / t_ref, config=best[1].__dict__))
                print(f"{n}x{k} m={m} split={split} det={best[0]*1e3:.1f}us "
                      f"ref={t_ref*1e3:.1f}us ratio={best[0]/t_ref:.2f} {best[1]}", flush=True)
        with open(out_path, "w") as fh:
            json.dump(results, fh, indent=1)
    # best split per shape by geomean over M
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
