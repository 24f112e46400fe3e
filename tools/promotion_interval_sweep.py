"""FP32 promotion decoupled from BLOCK_K (issue 10, H200): does a coarser promotion interval,
or a tile the shipped kernel cannot run at the family's interval, close the large-M gap?

The shipped kernel promotes through Triton's `max_num_imprecise_acc`, which adds the MMA's
partial sum into the fp32 accumulator at the end of each `tl.dot` and waits for the
warpgroup's MMAs there (docs/kernel-promotion.md). So the interval is tied to BLOCK_K
(SM90: 256 = BLOCK_K, one wait per K step), and a BLOCK_K 128 tile cannot run the family's
schedule at all. `promoted_mm_kernel` below promotes by hand instead: a loop over intervals
holding a loop of PROMOTE_K / BLOCK_K steps that chain their dots on one partial accumulator,
then `acc += part`; Triton flattens the pair (`tl.range(..., flatten=True)`) into one
pipelined loop of BLOCK_K steps. Cross-compiled for sm_90a on the CPU box (Triton 3.6, its
ptxas 12.8: no spills, no wgmma serialisation warning at 128 x 128 / 64 x 128): each step
issues its wgmmas and waits only for the previous step's (`wgmma.wait_group 1`), TMA loads run
ahead across interval boundaries, and only an interval's last step takes the branch with
`wgmma.wait_group 0` and the fp32 adds. That is the arithmetic Triton's promotion emits
(partial sum from zero over PROMOTE_K elements of K in k32 MMA steps, the first with the
accumulator input off, then one fp32 add), so:

- at PROMOTE_K 256 every tile, BLOCK_K 128 or 256, should give the shipped bits: checked per
  cell against the shipped launch (`torch.equal`); a BLOCK_K 128 tile needs half the shared
  memory per stage, so more stages or two programs per SM;
- at PROMOTE_K 512 / 1024 the waits halve / quarter, and the accuracy is the question: per
  cell the error against an fp64 product (bench/gemm/fp64_error.py's probe operands) next to
  cuBLAS default's, which issue 10 bounds at 1.10x.

Options per tile: PERSISTENT (one program per SM walking the tiles in a flattened loop, so a
tile's epilogue overlaps the next tile's loads) and WARP_SPECIALIZE (Triton's automatic warp
specialisation on the K loop; documented for Blackwell, and the sm_90a cross-compile shows no
change: the arm is there to see it measured). None of them touches the arithmetic; an arm
that does not compile or launch is reported, not fatal.

Checks, per shape: every arm of one (PROMOTE_K, SPLIT_K) gives, at every M, the rows the
group's first arm gives at the largest M (the invariance rule; activations of smaller M are
prefixes of the largest), counted and printed; the control (`control-interval-follows-m`:
the group's first tile with its interval doubled at the largest M) must be flagged.

Developer tool: writes promotion_interval.json and promotion_interval.md into OUT_DIR (and
promotion_interval.cells.jsonl, one line per cell as it completes).
    python tools/promotion_interval_sweep.py OUT_DIR [--set named|unnamed|all] [--shapes NxK,..]
        [--ms 1,16,128,512,2048,8192] [--promote 256,512] [--device cuda|cpu]
On a CPU (`--device cpu`, Triton's interpreter) it runs the bit checks at small shapes (the
unit test); times and errors need a GPU. A winner moves into det_suite (the kernel's K loop,
the family's interval in policy/tiles.py, the SM90 table) with an H200 evidence run, and a
new interval re-records the GSM8K fixture.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from det_suite.bench.sweep_cli import (add_device_option, control_verdict, cpu_requested,
                                       finish, int_list, wants_gpu)

if __name__ == "__main__" and cpu_requested(sys.argv[1:]):
    # The interpreter must be chosen before Triton is imported (platform/interpreter.py).
    from det_suite.platform.interpreter import use_interpreter
    use_interpreter()

import torch  # noqa: E402 - after the interpreter switch
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from det_suite.bench.gemm.fp64_error import relative_error  # noqa: E402
from det_suite.bench.gemm.render import config_text  # noqa: E402
from det_suite.kernels.fp8_epilogue import finish_split_k_tile, store_scaled_tile  # noqa: E402
from det_suite.models.catalog import projections  # noqa: E402
from det_suite.ops import launch_fp8_gemm  # noqa: E402
from det_suite.ops.launch import split_k_counters  # noqa: E402
from det_suite.policy import shipped_policy  # noqa: E402
from det_suite.tune import precompile_launches  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from persistent_tile_order import tile_coordinates  # noqa: E402
from same_bits_policy import geomean_or_none, markdown_table, same_bits_summary  # noqa: E402

NAMED = [(p.n, p.k) for p in projections("qwen3-8b")]
UNNAMED = [(4096, 14336), (28672, 4096), (10240, 8192), (8192, 28672), (5120, 4096),
           (5120, 8192), (2560, 9728), (2560, 4096)]
# Small enough for the interpreter, with a K tail (K % 256 != 0) and a split-K entry.
CPU_SHAPES = [(64, 640), (128, 512)]
CPU_SPLIT = {(128, 512): 2}
FAMILY = "sm90"
CONTROL = "control-interval-follows-m"
# Interpreter only: a group's relative Frobenius error against the fp64 product of the sweep's
# operands. Its fp32 dots leave ~6e-3 on them (the bf16 output of sums that cancel +-448^2
# outliers, measured); a lost or repeated K step leaves order 1. On a GPU the MMA's own
# partial-sum rounding of those outliers is of the outputs' size, so there the accuracy
# measure is the probe's error beside cuBLAS's (`errors`), not this.
INTERPRETER_EXACT_TOLERANCE = 2e-2
CALLS = 16


def graph_timer(fn) -> float:
    """us per call of `fn` in a CUDA Graph of CALLS back-to-back calls (L2 warm)."""
    from det_suite.bench.timing import graph_median_us

    return graph_median_us(fn, calls_per_graph=CALLS, warmup_ms=2, rep_ms=10)


@triton.jit
def _promoted_chunk(a_desc, b_desc, off_m, off_n, k_begin, k_end,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    PROMOTE_K: tl.constexpr, SWAP_AB: tl.constexpr,
                    WARP_SPECIALIZE: tl.constexpr):
    # Each interval: the MMA accumulates PROMOTE_K elements from zero in its own precision
    # (steps past K read TMA's zero fill: zero products), then one fp32 add promotes them.
    # The two loops are flattened into one of BLOCK_K steps, so the pipeline (and its
    # shared memory) is per BLOCK_K step, not per interval.
    # Swapped: the weight on the MMA's 64-row side, the tokens on its narrow side; the
    # accumulator is transposed back at the end.
    ACC_ROWS: tl.constexpr = BLOCK_N if SWAP_AB else BLOCK_M
    ACC_COLS: tl.constexpr = BLOCK_M if SWAP_AB else BLOCK_N
    acc = tl.zeros((ACC_ROWS, ACC_COLS), dtype=tl.float32)
    for k_start in tl.range(k_begin, k_end, PROMOTE_K, flatten=True,
                            warp_specialize=WARP_SPECIALIZE):
        part = tl.zeros((ACC_ROWS, ACC_COLS), dtype=tl.float32)
        for step in range(0, PROMOTE_K // BLOCK_K):
            k0 = k_start + step * BLOCK_K
            act = a_desc.load([off_m, k0])
            weight = b_desc.load([off_n, k0])
            if SWAP_AB:
                part = tl.dot(weight, act.T, part)
            else:
                part = tl.dot(act, weight.T, part)
        acc += part
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _promoted_tile(tile, a_desc, b_desc, out_ptr, partials_ptr, counters_ptr, a_scale_ptr,
                   b_scale_ptr, M, N, K, K_CHUNK, stride_ps, stride_pm, stride_pn,
                   stride_om, stride_on,
                   SPLIT_K: tl.constexpr, WRITE_PARTIALS: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   PROMOTE_K: tl.constexpr, GROUP_M: tl.constexpr, SWAP_AB: tl.constexpr,
                   WARP_SPECIALIZE: tl.constexpr):
    pid_m, pid_n = tile_coordinates(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    if WRITE_PARTIALS:
        split = tl.program_id(1)
        k_begin = split * K_CHUNK
        acc = _promoted_chunk(a_desc, b_desc, off_m, off_n, k_begin,
                              tl.minimum(k_begin + K_CHUNK, K), BLOCK_M, BLOCK_N, BLOCK_K,
                              PROMOTE_K, SWAP_AB, WARP_SPECIALIZE)
        partial_ptrs = partials_ptr + offs_m[:, None] * stride_pm + offs_n[None, :] * stride_pn
        tl.store(partial_ptrs + split * stride_ps, acc,
                 mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])
        finish_split_k_tile(partial_ptrs, stride_ps, counters_ptr + tile, out_ptr, out_ptr,
                            a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N, stride_om,
                            stride_on, False, SPLIT_K, BLOCK_M, BLOCK_N, 0, 0, 1)
    else:
        # The shipped order: each chunk from a fresh accumulator, chunks added in order to a
        # zero-initialised total (one chunk: the chunk itself, as the shipped kernel).
        if SPLIT_K == 1:
            total = _promoted_chunk(a_desc, b_desc, off_m, off_n, 0, K, BLOCK_M, BLOCK_N,
                                    BLOCK_K, PROMOTE_K, SWAP_AB, WARP_SPECIALIZE)
        else:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for split in tl.static_range(SPLIT_K):
                k_begin = split * K_CHUNK
                total += _promoted_chunk(a_desc, b_desc, off_m, off_n, k_begin,
                                         tl.minimum(k_begin + K_CHUNK, K), BLOCK_M, BLOCK_N,
                                         BLOCK_K, PROMOTE_K, SWAP_AB, WARP_SPECIALIZE)
        store_scaled_tile(total, out_ptr, out_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n,
                          M, N, stride_om, stride_on, False, 0, 0, 1)


# M is never specialised, as in the shipped kernels: Triton would compile M == 1 (a decode
# call) as a separate constant-M kernel, and the comparison would time another program.
@triton.jit(do_not_specialize=["M"])
def promoted_mm_kernel(a_desc, b_desc, out_ptr, partials_ptr, counters_ptr, a_scale_ptr,
                       b_scale_ptr, M, N, K, K_CHUNK, NUM_PROGRAMS,
                       stride_ps, stride_pm, stride_pn, stride_om, stride_on,
                       SPLIT_K: tl.constexpr, WRITE_PARTIALS: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       PROMOTE_K: tl.constexpr, GROUP_M: tl.constexpr, SWAP_AB: tl.constexpr,
                       PERSISTENT: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    if PERSISTENT:
        num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=True):
            _promoted_tile(tile, a_desc, b_desc, out_ptr, partials_ptr, counters_ptr,
                           a_scale_ptr, b_scale_ptr, M, N, K, K_CHUNK, stride_ps, stride_pm,
                           stride_pn, stride_om, stride_on, SPLIT_K, WRITE_PARTIALS,
                           BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_K, GROUP_M, SWAP_AB,
                           WARP_SPECIALIZE)
    else:
        _promoted_tile(tl.program_id(0), a_desc, b_desc, out_ptr, partials_ptr, counters_ptr,
                       a_scale_ptr, b_scale_ptr, M, N, K, K_CHUNK, stride_ps, stride_pm,
                       stride_pn, stride_om, stride_on, SPLIT_K, WRITE_PARTIALS,
                       BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_K, GROUP_M, SWAP_AB, WARP_SPECIALIZE)


@dataclass(frozen=True)
class Arm:
    """One launch of `promoted_mm_kernel`."""

    block_m: int
    block_n: int
    block_k: int
    promote_k: int
    split_k: int
    num_warps: int
    num_stages: int
    swap_ab: bool = False
    workspace: bool = False  # split programs write partials; the last to arrive adds them
    persistent: bool = False
    warp_specialize: bool = False
    group_m: int = 8

    def __post_init__(self):
        if self.promote_k % self.block_k:
            raise ValueError(f"promote_k must be a multiple of block_k; got {self.promote_k} "
                             f"and {self.block_k}")
        if self.persistent and self.workspace:
            raise ValueError("a persistent arm walks whole tiles: workspace must be off")

    @property
    def tag(self) -> str:
        return (f"p{self.promote_k} bm{self.block_m} bn{self.block_n} bk{self.block_k} "
                f"sk{self.split_k} w{self.num_warps} s{self.num_stages}"
                + "".join(f" {flag}" for flag, on in (
                    ("ws", self.workspace), ("swap", self.swap_ab),
                    ("persistent", self.persistent), ("warpspec", self.warp_specialize)) if on))

    def k_chunk(self, k: int) -> int:
        """Elements of K per split chunk: whole promotion intervals (so, at the shipped
        interval, the shipped BLOCK_K 256 chunks)."""
        intervals = -(-k // self.promote_k)
        return -(-intervals // self.split_k) * self.promote_k


def launch_promoted(a: torch.Tensor, w_nk: torch.Tensor, a_scale: torch.Tensor,
                    w_scale: torch.Tensor, out: torch.Tensor, arm: Arm, *,
                    sm_count: int, compile_only: bool = False):
    """out (M, N) = a (M, K) fp8 @ w_nk (N, K).T fp8, scaled, through the arm's launch."""
    m, k = a.shape
    n = w_nk.shape[0]
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [arm.block_m, arm.block_k])
    b_desc = TensorDescriptor(w_nk, [n, k], [w_nk.stride(0), 1], [arm.block_n, arm.block_k])
    tiles = triton.cdiv(m, arm.block_m) * triton.cdiv(n, arm.block_n)
    if arm.workspace:
        partials = torch.empty((arm.split_k, m, n), dtype=torch.float32, device=a.device)
        counters = split_k_counters(a.device, tiles)
        grid = (tiles, arm.split_k)
    else:
        partials, counters = out, out  # never read: WRITE_PARTIALS is off
        grid = (min(tiles, sm_count) if arm.persistent else tiles,)
    args = (a_desc, b_desc, out, partials, counters, a_scale, w_scale, m, n, k,
            arm.k_chunk(k), grid[0], *(partials.stride() if arm.workspace else (0, 0, 0)),
            out.stride(0), out.stride(1))
    options = dict(SPLIT_K=arm.split_k, WRITE_PARTIALS=arm.workspace, BLOCK_M=arm.block_m,
                   BLOCK_N=arm.block_n, BLOCK_K=arm.block_k, PROMOTE_K=arm.promote_k,
                   GROUP_M=arm.group_m, SWAP_AB=arm.swap_ab, PERSISTENT=arm.persistent,
                   WARP_SPECIALIZE=arm.warp_specialize, num_warps=arm.num_warps,
                   num_stages=arm.num_stages, enable_fp_fusion=False)
    if compile_only:
        return promoted_mm_kernel.warmup(*args, grid=grid, **options)
    promoted_mm_kernel[grid](*args, **options)
    return out


def time_references(timer, a, w_nk, a_scale, w_scale, out_shipped, shipped) -> dict:
    """One cell's baselines by `timer`: `torch._scaled_mm` (default accumulation, BF16 out)
    and the shipped launch (`shipped`, writing `out_shipped`), in microseconds."""
    return {"torch_us": timer(lambda: torch._scaled_mm(
                a, w_nk.t(), scale_a=a_scale.reshape(()), scale_b=w_scale.reshape(()),
                out_dtype=torch.bfloat16)),
            "shipped_us": timer(lambda: launch_fp8_gemm(a, w_nk.t(), a_scale, w_scale, None,
                                                        out_shipped, shipped))}


def shipped_config(m: int, n: int, k: int, sm_count: int):
    return shipped_policy(FAMILY).on_device(sm_count).select(m, n, k)


def candidate_arms(m: int, shipped, promotes, small: bool, extra_splits=()) -> list[Arm]:
    """The tiles worth timing at M rows, for each interval; the shipped entry's split, and
    at decode rows (M <= 64) also `extra_splits` (a split is its own schedule: its arms are a
    group of their own)."""
    split, ws = shipped.split_k, shipped.use_workspace
    if small:
        # For the interpreter's shapes: a swapped and a plain tile, BLOCK_K 128 and 256, and
        # the plain tile persistent (two programs) and warp-specialised, which only move work
        # in time.
        tiles = [(16, 64, 4, 2, True), (32, 64, 4, 2, False)]
        arms = [Arm(bm, bn, bk, p, split, w, st, swap_ab=swap, workspace=ws and swap)
                for p in promotes for bk in (128, 256) if p % bk == 0
                for bm, bn, w, st, swap in tiles]
        arms += [Arm(16, 64, 128, p, sk, 4, 2, swap_ab=True, workspace=True)
                 for sk in sorted(set(extra_splits) - {split}) for p in promotes]
        return arms + [Arm(32, 64, 128, promotes[0], split, 4, 2, persistent=True),
                       Arm(32, 64, 128, promotes[0], split, 4, 2, warp_specialize=True)]
    if m <= 64:
        bm = 16 if m <= 16 else (32 if m <= 32 else 64)
        splits = sorted({split, *extra_splits})
        return [Arm(bm, bn, bk, p, sk, 4, st, swap_ab=True,
                    workspace=ws if sk == split else sk > 1)
                for sk in splits for p in promotes for bk in (128, 256) if p % bk == 0
                for bn in (64, 128) for st in ((4, 6, 8) if bk == 128 else (3, 4, 6))]
    plain, persistent, warpspec = [], [], []
    for p in promotes:
        for bk in (128, 256):
            if p % bk:
                continue
            stages = (3, 4, 5) if bk == 128 else (2, 3)
            # 128 x 128 on two warpgroups (one program per SM: 144 registers a thread);
            # 64 x 128 on one (two programs per SM where the stages fit in half the shared
            # memory); 64 x 64 for the few tiles of M = 128; 128 x 256 spills (255
            # registers, sm_90a ptxas 12.8), so one depth of it.
            for bm, bn, w in ((128, 128, 8), (64, 128, 4), (64, 64, 4)):
                plain += [Arm(bm, bn, bk, p, split, w, st, workspace=ws and m <= 128)
                          for st in stages]
            plain.append(Arm(128, 256, bk, p, split, 8, stages[0], workspace=ws and m <= 128))
            persistent += [Arm(128, 128, bk, p, split, 8, st, persistent=True)
                           for st in stages[:2]]
            warpspec.append(Arm(128, 128, bk, p, split, 8, stages[1], warp_specialize=True))
    # The options that lean on newer compiler passes last: should one fault the device, the
    # plain tiles of the cell have been measured (and written to the progress file).
    return plain + persistent + warpspec


def control_arm(arm: Arm) -> Arm:
    """The positive control's launch at the largest M: the same tile, its interval doubled
    (a schedule that follows M, which the invariance check must catch)."""
    return replace(arm, promote_k=2 * arm.promote_k)


def group_key(arm, gpu: bool) -> tuple:
    """What fixes an arm's arithmetic: interval and split; under the interpreter also
    BLOCK_K (its dot sums a whole BLOCK_K in one numpy matmul, where wgmma steps k32 at a
    time whatever the tile)."""
    return (arm.promote_k, arm.split_k) + (() if gpu else (arm.block_k,))


def _operands(n: int, k: int, ms, device, seed: int = 0):
    # Outlier products of +448^2 in K's first columns, cancelled by -448^2 in its last: every
    # partial sum carries them, so its rounding (the MMA's, and any fp32 add's) reaches the
    # small outputs, and a sum in another grouping shows after the bf16 rounding, in the
    # interpreter's exact-product arithmetic too.
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    a = torch.randn(max(ms), k, generator=g)
    w[:, [5, 6, k - 6, k - 5]] = 448.0
    a[:, [5, 6]] = 448.0
    a[:, [k - 6, k - 5]] = -448.0
    w = w.to(torch.float8_e4m3fn).to(device)
    a = a.to(torch.float8_e4m3fn).to(device)
    scale = lambda v: torch.tensor([v], dtype=torch.float32, device=device)  # noqa: E731
    return a, w, scale(0.02), scale(0.01)


def measure_shape(n: int, k: int, ms, promotes, *, device, sm_count: int,
                  split_override: int | None = None, small_arms: bool = False,
                  extra_splits=(), timer=None, log=print, on_cell=None) -> dict:
    """Every arm at every M of one shape: bits against the shipped launch (where the arm has
    the shipped interval and split) and against its group at the largest M; with a `timer`
    (fn -> us per call; the GPU run's CUDA Graph timer) also each arm's time, torch._scaled_mm's
    and the shipped launch's, and the fp64 error per group beside torch._scaled_mm's."""
    gpu = device.type == "cuda"
    a_all, w, sa, sw = _operands(n, k, ms, device)
    m_big = max(ms)
    group_ref: dict[tuple, torch.Tensor] = {}
    cells, compared, differ, first_arm = [], 0, 0, None
    worst_exact_error = None if gpu else 0.0
    # Under the interpreter, each group's reference rows against the exact product of the
    # same operands: a schedule that every tile got wrong the same way (a lost or repeated K
    # step) keeps the bits consistent but not the value. Not on a GPU, where the MMA's own
    # rounding of these operands is of the outputs' size (its measure is `errors`).
    exact = None if gpu else (a_all.double() @ w.double().t()) * (float(sa) * float(sw))
    for m in sorted(ms, reverse=True):
        a = a_all[:m]
        shipped = shipped_config(m, n, k, sm_count)
        if split_override:
            shipped = replace(shipped, split_k=split_override, use_workspace=m <= 16)
        arms = candidate_arms(m, shipped, promotes, small_arms, extra_splits)
        out_shipped = torch.empty(m, n, dtype=torch.bfloat16, device=device)
        launch_fp8_gemm(a, w.t(), sa, sw, None, out_shipped, shipped)
        if gpu:
            scratch = torch.empty_like(out_shipped)
            precompile_launches([
                lambda _launcher, arm=arm: launch_promoted(a, w, sa, sw, scratch, arm,
                                                           sm_count=sm_count, compile_only=True)
                for arm in arms])
        cell = {"n": n, "k": k, "m": m, "arms": [],
                "shipped": f"p{shipped.promote_k} {config_text(asdict(shipped))}"}
        if timer is not None:
            cell.update(time_references(timer, a, w, sa, sw, out_shipped, shipped))
        for arm in arms:
            out = torch.empty_like(out_shipped)
            row = {"arm": arm.tag, "config": asdict(arm)}
            try:
                launch_promoted(a, w, sa, sw, out, arm, sm_count=sm_count)
                if timer is not None:
                    row["us"] = timer(
                        lambda: launch_promoted(a, w, sa, sw, out, arm, sm_count=sm_count))
            except Exception as exc:  # noqa: BLE001 - resource limits, unsupported options
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                cell["arms"].append(row)
                log(f"{n}x{k} m={m} {arm.tag}: FAILED {row['error']}")
                continue
            key = group_key(arm, gpu)
            if key == group_key(shipped, gpu):
                row["equals_shipped"] = bool(torch.equal(out, out_shipped))
            # A group's reference: its first arm at the largest M it runs at (the rows of
            # every smaller M are a prefix of it).
            ref = group_ref.get(key)
            if ref is None:
                group_ref[key] = out
                first_arm = first_arm or arm
                if exact is not None:
                    row["exact_error"] = relative_error(out, exact)
                    worst_exact_error = max(worst_exact_error, row["exact_error"])
            else:
                compared += 1
                same = torch.equal(out, ref[:m])
                differ += not same
                row["equals_group"] = bool(same)
            cell["arms"].append(row)
        if timer is not None:
            cell["errors"] = _errors(m, n, k, arms, device, sm_count)
        cells.append(cell)
        log(_cell_line(cell))
        if on_cell is not None:
            on_cell(cell)
    # The control: at the largest M, the group's first tile with its interval doubled (what a
    # schedule that follows M would run there) against the group's rows.
    control_flagged = False  # no arm ran at the largest M: nothing to control
    if first_arm is not None:
        control = torch.empty(m_big, n, dtype=torch.bfloat16, device=device)
        launch_promoted(a_all, w, sa, sw, control, control_arm(first_arm), sm_count=sm_count)
        control_flagged = not torch.equal(control, group_ref[group_key(first_arm, gpu)])
    return {"n": n, "k": k, "cells": cells, "compared": compared, "differ": differ,
            "control_flagged": control_flagged, "worst_exact_error": worst_exact_error}


def _errors(m, n, k, arms, device, sm_count) -> dict:
    """Per (PROMOTE_K, SPLIT_K) group: the fp64 error of its first arm that ran, beside
    cuBLAS default's (the probe's positive-mean operands: bench/gemm/fp64_error.py)."""
    from det_suite.bench.gemm.fp64_error import measure_fp64_error

    def reference(a, w_kn, a_scale, w_scale):
        return torch._scaled_mm(a, w_kn, scale_a=a_scale.reshape(()),
                                scale_b=w_scale.reshape(()), out_dtype=torch.bfloat16)

    errors = {}
    for arm in arms:
        key = schedule_name(asdict(arm))
        if key in errors:
            continue

        def det(a, w_kn, a_scale, w_scale, arm=arm):
            out = torch.empty(a.shape[0], w_kn.shape[1], dtype=torch.bfloat16, device=device)
            return launch_promoted(a, w_kn.t(), a_scale, w_scale, out, arm, sm_count=sm_count)
        try:
            errors[key] = measure_fp64_error(
                m, n, k, det=det, reference=reference,
                generator=torch.Generator(device=device).manual_seed(1), device=device,
                out_dtype=torch.bfloat16).to_json()
        except Exception:  # noqa: BLE001 - the next arm of the group may run
            continue
    return errors


def schedule_name(config: dict) -> str:
    """An arm's schedule as the tables print it: interval and split."""
    return f"p{config['promote_k']}/sk{config['split_k']}"


def best_by_schedule(cell: dict) -> dict[str, dict]:
    """Per schedule (interval and split): the fastest arm that ran (GPU cells only)."""
    best = {}
    for row in cell["arms"]:
        if "us" not in row:
            continue
        key = schedule_name(row["config"])
        if key not in best or row["us"] < best[key]["us"]:
            best[key] = row
    return best


def _cell_line(cell: dict) -> str:
    ran = [r for r in cell["arms"] if "error" not in r]
    shipped_bits = [r["equals_shipped"] for r in ran if "equals_shipped" in r]
    line = (f"{cell['n']}x{cell['k']} m={cell['m']}: {len(ran)}/{len(cell['arms'])} arms ran, "
            f"{sum(shipped_bits)}/{len(shipped_bits)} equal the shipped bits")
    if "torch_us" in cell:
        best = best_by_schedule(cell)
        line += f"; torch {cell['torch_us']:.1f} us, shipped {cell['shipped_us']:.1f}" + "".join(
            f", {key} {row['us']:.1f} ({row['arm']})" for key, row in sorted(best.items()))
    return line


def _plain(row: dict) -> bool:
    return not row["config"]["persistent"] and not row["config"]["warp_specialize"]


# What a table could take from the sweep without changing a bit (same_bits_policy.py): the
# tiles the shipped kernel runs today (its promotion is per tl.dot, so BLOCK_K = interval),
# then hand promotion's smaller BLOCK_K, then the persistent and warp-specialised grids.
SAME_BITS_CLASSES = {
    "shipped kernel's tiles": lambda row: (_plain(row) and row["config"]["block_k"]
                                           == row["config"]["promote_k"]),
    "+ BLOCK_K below the interval": _plain,
    "+ persistent / warp-specialised": lambda row: True,
}


def summarize(shapes: list[dict]) -> dict:
    """Per schedule (interval and split): geomean and worst of its best arm / torch._scaled_mm
    over the cells it ran in (extra splits only at decode rows: see `cells`), and its worst
    error ratio; the shipped kernel's own geomean beside them; and the same-bits summary."""
    per_schedule: dict[str, list] = {}
    errors = {}
    for shape in shapes:
        for cell in shape["cells"]:
            if "torch_us" not in cell:
                continue
            for key, row in best_by_schedule(cell).items():
                per_schedule.setdefault(key, []).append(
                    (row["us"] / cell["torch_us"], f"{shape['n']}x{shape['k']} m={cell['m']}"))
            for key, err in cell.get("errors", {}).items():
                errors[key] = max(errors.get(key, 0.0), err["ratio"])

    same_bits = same_bits_summary([c for s in shapes for c in s["cells"]], SAME_BITS_CLASSES)
    return {"shipped_geomean": same_bits["shipped"]["geomean"],
            "same_bits": same_bits,
            "schedules": {key: {"geomean": geomean_or_none(r for r, _ in rows),
                                "worst": max(rows)[0], "worst_cell": max(rows)[1],
                                "cells": len(rows), "worst_error_ratio": errors.get(key)}
                          for key, rows in sorted(per_schedule.items())}}


def _markdown(payload: dict) -> str:
    lines = [f"# Promotion interval sweep ({payload['device']})", "",
             f"Bits: {payload['compared']} cross-M comparisons, {payload['differ']} differ; "
             f"{payload['shipped_equal']} of {payload['shipped_compared']} arms at the shipped "
             "interval equal the shipped launch.", ""]
    summary = payload["summary"]
    if summary["schedules"]:
        lines += [f"Shipped kernel / torch._scaled_mm geomean: {summary['shipped_geomean']:.3f}",
                  "", "| schedule (interval / split) | best arm / torch geomean | worst | cells "
                  "| worst fp64 error / cuBLAS default |", "| --- | --- | --- | --- | --- |"]
        for key, row in summary["schedules"].items():
            err = row["worst_error_ratio"]
            lines.append(f"| {key} | {row['geomean']:.3f} | {row['worst']:.3f} "
                         f"({row['worst_cell']}) | {row['cells']} | "
                         f"{'-' if err is None else f'{err:.3f}'} |")
        lines += ["", "Per cell the fastest launch with the shipped bits (the shipped one, or an "
                  "arm that gave its bits), over torch, by the arms a table may use:", ""]
        lines += markdown_table(summary["same_bits"])
        lines += ["", "| shape | M | torch us | shipped us | best per schedule |",
                  "| --- | --- | --- | --- | --- |"]
        for shape in payload["shapes"]:
            for cell in shape["cells"]:
                best = best_by_schedule(cell)
                lines.append(f"| {shape['n']}x{shape['k']} | {cell['m']} | "
                             f"{cell['torch_us']:.1f} | {cell['shipped_us']:.1f} | "
                             + "; ".join(f"{r['us']:.1f} {r['arm']}"
                                         for _, r in sorted(best.items())) + " |")
    else:
        lines.append("Not timed (no GPU): bit checks only.")
    lines += ["", control_verdict(CONTROL, payload["control_flagged"])]
    return "\n".join(lines) + "\n"


def _shape_list(text: str) -> list[tuple[int, int]]:
    """An argparse type: comma-separated NxK shapes, each side a positive multiple of 16
    (what the TMA descriptors and torch._scaled_mm take)."""
    shapes = []
    for item in text.split(","):
        try:
            n, k = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected NxK shapes like 4096x14336; got {item!r}")
        if n < 16 or k < 16 or n % 16 or k % 16:
            raise argparse.ArgumentTypeError(f"N and K must be positive multiples of 16; "
                                             f"got {item!r}")
        shapes.append((n, k))
    return shapes


def _summarize_again(out_dir: Path, recorded: Path) -> int:
    try:
        payload = json.loads(recorded.read_text())
        payload["summary"] = summarize(payload["shapes"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"--from-json: {recorded} is not a readable promotion_interval.json "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    if out_dir.resolve() == recorded.parent.resolve():
        print(f"--from-json: OUT_DIR must differ from {recorded.parent} (the recorded run "
              "stays as it was)", file=sys.stderr)
        return 2
    return finish(out_dir, "promotion_interval", payload, _markdown(payload),
                  candidates="arms at one interval (as recorded)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--set", choices=("named", "unnamed", "all"), default="all")
    parser.add_argument("--shapes", type=_shape_list, default=None,
                        help="NxK,NxK,...: these shapes instead of --set's")
    parser.add_argument("--ms", type=int_list, default=None,
                        help="rows per call (default 1,16,128,512,2048,8192; 1,3,40 on CPU)")
    parser.add_argument("--promote", type=int_list, default=None,
                        help="intervals along K (default 256,512 on a GPU, 256,512 on CPU)")
    parser.add_argument("--decode-splits", type=int_list, default=[2, 4],
                        help="splits of K also tried at M <= 64, each its own schedule "
                             "(default 2,4: what a decode GEMM of few tiles gains from using "
                             "every SM)")
    parser.add_argument("--from-json", type=Path, default=None, metavar="JSON",
                        help="measure nothing: summarize a recorded promotion_interval.json "
                             "again (e.g. after a new summary was added) into OUT_DIR")
    add_device_option(parser)
    args = parser.parse_args(argv)
    if args.from_json is not None:
        return _summarize_again(args.out_dir, args.from_json)
    gpu = wants_gpu(parser, args)
    promotes = args.promote or [256, 512]
    if any(p % 128 for p in promotes):
        parser.error(f"--promote: intervals must be multiples of 128; got {promotes}")
    device = torch.device(args.device)
    # On the CPU two "SMs", so a persistent program walks several tiles.
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count if gpu else 2
    ms = args.ms or ([1, 16, 128, 512, 2048, 8192] if gpu else [1, 3, 40])
    sets = {"named": NAMED, "unnamed": UNNAMED, "all": NAMED + UNNAMED}
    shapes = args.shapes or (sets[args.set] if gpu else CPU_SHAPES)
    started = time.time()
    results = []
    # Each cell as it completes, one JSON line: what survives a run that is cut off (the
    # final JSON and Markdown are written atomically at the end).
    args.out_dir.mkdir(parents=True, exist_ok=True)
    progress = args.out_dir / "promotion_interval.cells.jsonl"
    progress.write_text("")

    def record(cell):
        with progress.open("a") as f:
            f.write(json.dumps(cell) + "\n")

    for n, k in shapes:
        results.append(measure_shape(n, k, ms, promotes, device=device, sm_count=sm_count,
                                     split_override=None if gpu else CPU_SPLIT.get((n, k)),
                                     small_arms=not gpu, extra_splits=args.decode_splits,
                                     timer=graph_timer if gpu else None,
                                     on_cell=record))
        print(f"{n}x{k}: {results[-1]['compared']} compared, {results[-1]['differ']} differ "
              f"[{time.time() - started:.0f} s]", flush=True)
    shipped_rows = [r for s in results for c in s["cells"] for r in c["arms"]
                    if "equals_shipped" in r]
    payload = {
        "kind": "promotion-interval-sweep",
        "device": torch.cuda.get_device_name() if gpu else "cpu (Triton interpreter)",
        "torch": torch.__version__, "triton": triton.__version__,
        "promotes": promotes, "ms": ms,
        "compared": sum(s["compared"] for s in results),
        "differ": sum(s["differ"] for s in results),
        "shipped_compared": len(shipped_rows),
        "shipped_equal": sum(r["equals_shipped"] for r in shipped_rows),
        "control_flagged": all(s["control_flagged"] for s in results),
        "worst_exact_error": None if gpu else max(s["worst_exact_error"] for s in results),
        "candidates_equal": (all(s["differ"] == 0 for s in results)
                             and all(r["equals_shipped"] for r in shipped_rows)
                             and (gpu or all(s["worst_exact_error"] <= INTERPRETER_EXACT_TOLERANCE
                                             for s in results))),
        "summary": summarize(results),
        "shapes": results,
    }
    return finish(args.out_dir, "promotion_interval", payload, _markdown(payload),
                  candidates="arms at one interval (or, on the CPU, left the exact product)")


if __name__ == "__main__":
    raise SystemExit(main())
