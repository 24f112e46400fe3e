"""Does FP32 promotion on two out-of-phase math warpgroups (tools/pingpong_gemm_kernel.py)
close the large-M gap of issue 10? Developer sweep, one GPU process, nothing in det_suite.

Per shape and M (M >= 128: the kernel's tile is 128 rows), every arm against
`torch._scaled_mm` (default accumulation) and the shipped launch, CUDA Graph timing as in
promotion_interval_sweep.py, and bits:

- an arm at the shipped interval (256) must give the shipped launch's bits (`torch.equal`):
  the claim that it runs the shipped reduction schedule on a different warp layout;
- every arm of one interval must give, at every M, the rows the interval's first arm gives
  at the largest M (the invariance rule), counted and printed;
- the control: an arm promoting every 512 against the shipped launch must differ (the check
  can fail);
- at interval 512 also the fp64 error beside cuBLAS default's (bench/gemm/fp64_error.py).

    python tools/pingpong_gemm_sweep.py OUT_DIR [--set named|unnamed|all] [--ms 128,...]
    python tools/pingpong_gemm_sweep.py OUT_DIR --cross-compile   # CPU: sm_90a ptxas report

`--cross-compile` needs no GPU: it compiles every arm for sm_90a with Triton's own ptxas and
writes registers, spills, shared memory and ptxas warnings (e.g. C7514, serialised wgmma) to
OUT_DIR/cross_compile.json; it exits non-zero if an arm fails, spills or is serialised.
Writes pingpong.json and pingpong.md; pingpong.cells.jsonl gets one line per cell as it
completes, so a run that is cut off keeps its cells, and is removed once pingpong.json holds
them (a device call returns at most eight files).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pingpong_gemm_kernel import pingpong_fp8_mm_kernel  # noqa: E402

from det_suite.models.catalog import projections  # noqa: E402
from det_suite.bench.sweep_cli import control_verdict, finish  # noqa: E402
from det_suite.reports.files import write_json_atomic  # noqa: E402
from same_bits_policy import geomean_or_none, markdown_table, same_bits_summary  # noqa: E402

NAMED = [(p.n, p.k) for p in projections("qwen3-8b")]
UNNAMED = [(4096, 14336), (28672, 4096), (10240, 8192), (8192, 28672), (5120, 4096),
           (5120, 8192), (2560, 9728), (2560, 4096)]
BLOCK_M = 128
MAXNREG = 168  # three warpgroups' worth of registers at one CTA per SM (65536 / 384)


@dataclass(frozen=True)
class Arm:
    block_k: int
    promote_k: int
    stages: int
    stagger: int
    block_n: int = 128
    group_m: int = 8
    math_regs: int = 232
    load_regs: int = 40
    persistent: bool = False  # one program per SM walking the tiles, else one per tile

    @property
    def tag(self) -> str:
        return (f"p{self.promote_k} bn{self.block_n} bk{self.block_k} s{self.stages}"
                + (f" stagger{self.stagger}" if self.stagger else "")
                + (" persistent" if self.persistent else ""))


# (BLOCK_K, PROMOTE_K, STAGES, STAGGER steps, ...). The H100 run of 2026-12-05 (one program
# per tile) found a stagger worth 1-2% and 6 stages better than 4 on long K; it lost where the
# epilogue and the ring's first fill are exposed once per tile. The persistent arms test that;
# the plain arms are kept as the baseline. Interval 256 is the family's (shipped bits); the
# one 512 arm is the control and the coarser interval's error.
ARMS = [Arm(128, 256, 4, 0), Arm(128, 256, 6, 1),
        Arm(128, 256, 6, 1, persistent=True), Arm(128, 256, 7, 1, persistent=True),
        Arm(128, 256, 6, 2, persistent=True), Arm(256, 256, 3, 1, persistent=True),
        Arm(128, 512, 6, 2, persistent=True)]


def _descriptors(a: torch.Tensor, w_nk: torch.Tensor, arm: Arm):
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    a_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, arm.block_k], gl.float8e4nv)
    b_layout = gl.NVMMASharedLayout.get_default_for([arm.block_n, arm.block_k], gl.float8e4nv)
    return (TensorDescriptor.from_tensor(a, [BLOCK_M, arm.block_k], a_layout),
            TensorDescriptor.from_tensor(w_nk, [arm.block_n, arm.block_k], b_layout))


def _constexprs(arm: Arm) -> dict:
    return dict(BLOCK_M=BLOCK_M, BLOCK_N=arm.block_n, BLOCK_K=arm.block_k,
                PROMOTE_K=arm.promote_k, GROUP_M=arm.group_m, STAGES=arm.stages,
                STAGGER=arm.stagger, MATH_REGS=arm.math_regs, LOAD_REGS=arm.load_regs)


def launch_pingpong(a, w_nk, a_scale, w_scale, out, arm: Arm):
    """out (M, N) = a (M, K) fp8 @ w_nk (N, K).T fp8, scaled, through the arm."""
    m, _ = a.shape
    n = w_nk.shape[0]
    a_desc, b_desc = _descriptors(a, w_nk, arm)
    tiles = triton.cdiv(m, BLOCK_M) * triton.cdiv(n, arm.block_n)
    if arm.persistent:
        sm_count = torch.cuda.get_device_properties(a.device).multi_processor_count
        tiles = min(tiles, sm_count)
    grid = (tiles,)
    pingpong_fp8_mm_kernel[grid](a_desc, b_desc, out, a_scale, w_scale, m, n, a.shape[1],
                                 out.stride(0), out.stride(1), **_constexprs(arm),
                                 num_warps=4, maxnreg=MAXNREG, enable_fp_fusion=False)
    return out


def cross_compile(arm: Arm, ptxas_dir: Path) -> dict:
    """Compile the arm for sm_90a without a GPU and run Triton's ptxas on its PTX."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    a = torch.empty(256, 4096, dtype=torch.float8_e4m3fn)
    w = torch.empty(4096, 4096, dtype=torch.float8_e4m3fn)
    a_desc, b_desc = _descriptors(a, w, arm)
    kernel = pingpong_fp8_mm_kernel
    signature = dict(a_desc=mangle_type(a_desc), b_desc=mangle_type(b_desc), out_ptr="*bf16",
                     a_scale_ptr="*fp32", b_scale_ptr="*fp32", M="i32", N="i32", K="i32",
                     stride_om="i32", stride_on="i32")
    constexprs = _constexprs(arm)
    signature.update({name: "constexpr" for name in constexprs})
    src = GluonASTSource(fn=kernel, signature=signature,
                         constexprs={(kernel.arg_names.index(k),): v
                                     for k, v in constexprs.items()})
    row = {"arm": arm.tag, "config": asdict(arm)}
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                  options=dict(num_warps=4, maxnreg=MAXNREG,
                                               enable_fp_fusion=False))
    except Exception as exc:  # noqa: BLE001 - reported per arm
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[-1][:300]}"
        return row
    ptx_path = ptxas_dir / f"{arm.tag.replace(' ', '_')}.ptx"
    ptx_path.write_text(compiled.asm["ptx"])
    ptxas = Path(triton.__file__).parent / "backends/nvidia/bin/ptxas"
    done = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(ptx_path), "-o",
                           str(ptx_path.with_suffix(".cubin"))], capture_output=True, text=True)
    report = done.stdout + done.stderr
    regs = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores", report)
    row.update(shared_bytes=compiled.metadata.shared,
               registers=int(regs.group(1)) if regs else None,
               spill_store_bytes=int(spills.group(1)) if spills else None,
               warnings=[line.strip() for line in report.splitlines() if "arning" in line],
               wgmma=len(re.findall(r"wgmma\.mma_async", compiled.asm["ptx"])),
               ptxas_rc=done.returncode)
    return row


def _cross_compile_main(out_dir: Path) -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arm in ARMS:
            row = cross_compile(arm, Path(tmp))
            rows.append(row)
            print(json.dumps(row))
    bad = [r for r in rows if r.get("error") or r.get("ptxas_rc") or r.get("spill_store_bytes")
           or any("C7514" in w for w in r.get("warnings", []))]
    write_json_atomic(out_dir / "cross_compile.json",
                      {"arms": rows, "bad": [r["arm"] for r in bad]})
    print(f"{len(rows)} arms cross-compiled for sm_90a, {len(bad)} bad")
    return 1 if bad else 0


def measure_shape(n: int, k: int, ms, *, on_cell, log=print) -> dict:
    from det_suite.bench.gemm.fp64_error import measure_fp64_error
    from det_suite.ops import launch_fp8_gemm

    from promotion_interval_sweep import (_operands, graph_timer, shipped_config,
                                          time_references)

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    device = torch.device("cuda")
    a_all, w, sa, sw = _operands(n, k, ms, device)
    group_ref: dict[int, torch.Tensor] = {}
    compared = differ = 0
    control_flagged = None
    cells = []
    for m in sorted(ms, reverse=True):
        a = a_all[:m]
        shipped = shipped_config(m, n, k, sm_count)
        out_shipped = torch.empty(m, n, dtype=torch.bfloat16, device=device)
        launch_fp8_gemm(a, w.t(), sa, sw, None, out_shipped, shipped)
        cell = {"n": n, "k": k, "m": m, "shipped": f"p{shipped.promote_k} "
                f"bm{shipped.block_m} bn{shipped.block_n} bk{shipped.block_k} "
                f"sk{shipped.split_k}", "arms": []}
        cell.update(time_references(graph_timer, a, w, sa, sw, out_shipped, shipped))
        for arm in ARMS:
            out = torch.empty_like(out_shipped)
            row = {"arm": arm.tag, "config": asdict(arm)}
            try:
                launch_pingpong(a, w, sa, sw, out, arm)
                torch.cuda.synchronize()
                row["us"] = graph_timer(lambda: launch_pingpong(a, w, sa, sw, out, arm))
            except Exception as exc:  # noqa: BLE001 - resource limits, compile failures
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                cell["arms"].append(row)
                log(f"{n}x{k} m={m} {arm.tag}: FAILED {row['error']}")
                continue
            if arm.promote_k == shipped.promote_k and shipped.split_k == 1:
                row["equals_shipped"] = bool(torch.equal(out, out_shipped))
            elif arm.promote_k != shipped.promote_k and control_flagged is None:
                # The control: another interval must not pass for the shipped schedule.
                control_flagged = not torch.equal(out, out_shipped)
            ref = group_ref.get(arm.promote_k)
            if ref is None:
                group_ref[arm.promote_k] = out
            else:
                compared += 1
                same = bool(torch.equal(out, ref[:m]))
                differ += not same
                row["equals_group"] = same
            cell["arms"].append(row)
        coarse = next((arm for arm in ARMS if arm.promote_k == 512), None)
        if coarse is not None:
            def det(a_, w_kn, a_scale, w_scale):
                out_ = torch.empty(a_.shape[0], w_kn.shape[1], dtype=torch.bfloat16,
                                   device=device)
                return launch_pingpong(a_, w_kn.t(), a_scale, w_scale, out_, coarse)

            def reference(a_, w_kn, a_scale, w_scale):
                return torch._scaled_mm(a_, w_kn, scale_a=a_scale.reshape(()),
                                        scale_b=w_scale.reshape(()), out_dtype=torch.bfloat16)
            err = measure_fp64_error(m, n, k, det=det, reference=reference,
                                     generator=torch.Generator(device=device).manual_seed(1),
                                     device=device, out_dtype=torch.bfloat16)
            cell["p512_error"] = asdict(err) if hasattr(err, "__dataclass_fields__") else {
                "det": err.det, "reference": err.reference, "rounding": err.rounding}
        cells.append(cell)
        log(_cell_line(cell))
        on_cell(cell)
    return {"n": n, "k": k, "cells": cells, "compared": compared, "differ": differ,
            "control_flagged": control_flagged}


def _cell_line(cell: dict) -> str:
    t = cell["torch_us"]
    arms = " ".join(f"{r['arm'].replace(' ', '/')}={r['us'] / t:.3f}"
                    + ("" if r.get("equals_shipped", True) else "!BITS")
                    for r in cell["arms"] if "us" in r)
    return (f"{cell['n']}x{cell['k']} m={cell['m']}: torch {t:.1f} us, shipped "
            f"{cell['shipped_us'] / t:.3f}; {arms}")


# The same-bits classes: what a table could take from this sweep without changing a bit.
SAME_BITS_CLASSES = {"plain grid": lambda row: not row["config"]["persistent"],
                     "any arm": lambda row: True}


def summarize(shapes: list[dict]) -> dict:
    """Geomeans against torch of each interval's best arm, and the same-bits summary
    (same_bits_policy.py): per cell the faster of the shipped tile and an arm with the
    shipped bits, by M, what det_suite could ship without changing a bit."""
    best = {256: [], 512: []}
    for shape in shapes:
        for cell in shape["cells"]:
            for p in best:
                times = [r["us"] for r in cell["arms"] if "us" in r
                         and r["config"]["promote_k"] == p]
                if times:
                    best[p].append(min(times) / cell["torch_us"])
    same_bits = same_bits_summary([c for s in shapes for c in s["cells"]], SAME_BITS_CLASSES)
    return {"shipped_geomean": same_bits["shipped"]["geomean"],
            "best_geomean": {p: geomean_or_none(v) for p, v in best.items()},
            "best_worst": {p: max(v) if v else None for p, v in best.items()},
            "same_bits": same_bits,
            "compared": sum(s["compared"] for s in shapes),
            "differ": sum(s["differ"] for s in shapes),
            "equals_shipped": [sum(1 for s in shapes for c in s["cells"] for r in c["arms"]
                                   if r.get("equals_shipped") is True),
                               sum(1 for s in shapes for c in s["cells"] for r in c["arms"]
                                   if "equals_shipped" in r)],
            "control_flagged": all(s["control_flagged"] is not False for s in shapes)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--set", choices=("named", "unnamed", "all"), default="all")
    parser.add_argument("--ms", default="128,512,2048,8192")
    parser.add_argument("--cross-compile", action="store_true")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.cross_compile:
        return _cross_compile_main(args.out_dir)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("pingpong_gemm_sweep: needs an SM90 GPU (the kernel is wgmma + TMA); "
              "use --cross-compile on a CPU", file=sys.stderr)
        return 2
    ms = [int(x) for x in args.ms.split(",")]
    shapes = {"named": NAMED, "unnamed": UNNAMED, "all": NAMED + UNNAMED}[args.set]
    progress = args.out_dir / "pingpong.cells.jsonl"
    started = time.time()
    results = []
    with progress.open("a") as sink:
        def on_cell(cell):
            sink.write(json.dumps(cell) + "\n")
            sink.flush()
        for n, k in shapes:
            results.append(measure_shape(n, k, ms, on_cell=on_cell))
    summary = summarize(results)
    payload = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "triton": triton.__version__, "ms": ms, "shapes": results, "summary": summary,
               "seconds": round(time.time() - started, 1),
               "control_flagged": summary["control_flagged"],
               "candidates_equal": summary["differ"] == 0 and (
                   summary["equals_shipped"][0] == summary["equals_shipped"][1])}
    print(json.dumps(summary))
    status = finish(args.out_dir, "pingpong", payload, render_markdown(payload),
                    candidates="an interval-256 arm (shipped bits) or a cross-M row")
    progress.unlink()  # pingpong.json holds every cell now
    return status


def render_markdown(payload: dict) -> str:
    summary = payload["summary"]
    lines = [f"# Ping-pong promotion sweep on {payload['device']}", "",
             "Geomean against torch._scaled_mm (graph replay) of the fastest launch with the "
             "shipped bits per cell: the shipped tile, or an interval-256 arm that gave its "
             "bits.", ""]
    lines += markdown_table(summary["same_bits"])
    lines += ["", control_verdict("p512 against the shipped launch",
                                  payload["control_flagged"]),
              "", f"Summary: {json.dumps(summary)}", ""]
    lines += [_cell_line(c) for s in payload["shapes"] for c in s["cells"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
