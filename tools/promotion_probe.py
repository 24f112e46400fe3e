"""Promotion probe (issue 10, H200): accuracy and speed of the FP8 GEMM with FP32 promotion
off / every 128 / every 256 elements of K, beside cuBLAS default and fast accumulation.

Writes JSON to argv[1]. A research tool: the shipped decision is in policy/tiles.py."""

import json
import math
import sys
from dataclasses import replace

import torch

from det_suite.bench.gemm.fp64_error import relative_error
from det_suite.bench.timing import make_timer
from det_suite.ops.launch import launch_fp8_gemm
from det_suite.ops.linear import device_policy

dev = torch.device("cuda")
policy = device_policy(dev)
out_path = sys.argv[1]
gen = torch.Generator(device=dev)
results = {"accuracy": [], "speed": []}


def operands(recipe, m, n, k):
    a = torch.randn((m, k), generator=gen, device=dev)
    w = torch.randn((n, k), generator=gen, device=dev)
    if recipe == "pos_a":
        a = a.abs() + 0.5
    elif recipe == "pos_both":
        a, w = a.abs() + 0.5, w + 0.25
    elif recipe == "pos_a_big":      # activations near the FP8 range, as calibrated ones are
        a = (a.abs() + 0.5) * 64
    elif recipe == "pos_both_big":
        a, w = (a.abs() + 0.5) * 64, (w + 0.25) * 64
    a8 = a.clamp(-448, 448).to(torch.float8_e4m3fn)
    w8 = w.clamp(-448, 448).to(torch.float8_e4m3fn)
    return a8, w8.t(), torch.tensor([1 / 16], device=dev), torch.tensor([1 / math.sqrt(k) / 16], device=dev)


def variants(m, n, k):
    base = policy.select(m, n, k)
    yield "p128", base
    yield "none", replace(base, promote_k=None)
    if k % 256 == 0 and base.split_k == 1:
        yield "bk256_p256", replace(base, block_k=256, promote_k=256,
                                    num_stages=min(base.num_stages, 3 if base.block_n <= 128 else 2))
        yield "bk256_p128", replace(base, block_k=256, promote_k=128,
                                    num_stages=min(base.num_stages, 3 if base.block_n <= 128 else 2))


for n, k in [(4096, 4096), (4096, 12288), (5120, 17408), (8192, 28672)]:
    for m in (1, 16, 128, 2048):
        for recipe in ("pos_a", "pos_both", "pos_a_big", "pos_both_big"):
            gen.manual_seed(n + k + m)
            a, w_kn, sa, sw = operands(recipe, m, n, k)
            exact = (a.double() @ w_kn.double()) * (float(sa) * float(sw))
            row = {"n": n, "k": k, "m": m, "recipe": recipe,
                   "bf16_rounding": relative_error(exact.to(torch.bfloat16), exact)}
            for fast in (False, True):
                o = torch._scaled_mm(a, w_kn, scale_a=sa.reshape(()), scale_b=sw.reshape(()),
                                     out_dtype=torch.bfloat16, use_fast_accum=fast)
                row["cublas_fast" if fast else "cublas_default"] = relative_error(o, exact)
            for name, cfg in variants(m, n, k):
                out = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
                try:
                    launch_fp8_gemm(a, w_kn, sa, sw, None, out, cfg)
                    torch.cuda.synchronize()
                    row[name] = relative_error(out, exact)
                except Exception as exc:  # noqa: BLE001
                    row[name] = f"{type(exc).__name__}: {exc}"[:200]
            results["accuracy"].append(row)
            print(json.dumps(row), flush=True)

timer = make_timer("graph", warmup_ms=10, rep_ms=40)
SPEED = len(sys.argv) < 3 or sys.argv[2] != "accuracy"
for n, k in [] if not SPEED else [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288), (5120, 17408)]:
    for m in (16, 128, 512, 2048, 8192):
        gen.manual_seed(1)
        a, w_kn, sa, sw = operands("pos_a", m, n, k)
        row = {"n": n, "k": k, "m": m}
        row["cublas"] = timer(lambda: torch._scaled_mm(a, w_kn, scale_a=sa.reshape(()),
                                                         scale_b=sw.reshape(()),
                                                         out_dtype=torch.bfloat16))
        base = policy.select(m, n, k)
        cands = dict(variants(m, n, k))
        for w in (4, 8):
            for bn in (128, 256):
                if base.swap_ab:
                    continue
                cands[f"bm128_bn{bn}_w{w}_p128"] = replace(base, block_m=128, block_n=bn, num_warps=w,
                                                           num_stages=3 if bn == 128 else 2, promote_k=128, use_workspace=False)
        for name, cfg in cands.items():
            out = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
            try:
                row[name] = timer(lambda: launch_fp8_gemm(a, w_kn, sa, sw, None, out, cfg))
            except Exception as exc:  # noqa: BLE001
                row[name] = f"{type(exc).__name__}: {exc}"[:200]
        results["speed"].append(row)
        print(json.dumps(row), flush=True)

with open(out_path, "w") as f:
    json.dump(results, f, indent=1)
