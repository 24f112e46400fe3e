"""Does a decode GEMM that normalises and quantizes its own input pay (issue 15, H200)?

Evidence `-i`'s decode profile (docs/decode-step-kernels.md, "Where the step goes now") has
every kernel boundary of a batch-1 step costing latency, not bandwidth: the 72 launches of
`bi_rmsnorm_quantize_kernel` a step take 3.5 us each for a few kilobytes, and the GEMM after
each waits for them. The candidate measured here removes those launches: the decode GEMM's
programs compute the residual add, the RMSNorm and the quantization of their activation
tile themselves, from the bf16 rows, in the K loop that feeds the MMA
(`norm_quantize_gemm_kernel` below). With SILU_PRODUCT the same kernel takes the down
projection's producer instead, `bi_mul_quantize_kernel`'s silu(gate) * up quantization
(elementwise: `_silu_product_quantized`), through a split-K workspace where the table splits.

Why it can keep the bits (the sweep checks it, torch.equal per cell):

- the row's 1/rms comes from `rmsnorm_row.rms_inverse_of` at the norm's BLOCK_H, in a kernel
  of the norm's warps (four, as the decode GEMM tiles), so the same lanes and reduction tree;
  every program of a row recomputes it (8 KB from L2), as the norm's own column programs do;
- the residual sum, the normalised value and its quantization are `rmsnorm_row.row_values`,
  `rms_apply` and `fp8_quantize.quantize_to_e4m3_grid`, elementwise, the helpers the norm
  kernel calls; the first program of the row stores the sum the next layer reads;
- the MMA sees the same FP8 operand bytes in the same K steps: the activation tile comes
  from registers instead of a TMA load, the weight still from TMA, the epilogue is
  `store_scaled_tile`.

Arms, per shape (Qwen3-8B's stacked qkv and gate_up, K = 4096, with their ModelOpt segments
and one input scale each; its down projection, 4096 x 12288, split 2) and M (decode batch
sizes):

- shipped: `add_rms_norm_quantized_stacked` (or `silu_mul_quantized` before down), one launch,
  then the FP8 GEMM as the shipped table launches it (PDL where the tile has it)
- fused:   `norm_quantize_gemm_kernel` alone, at the shipped tile (at M = 1 rounding only the
           live row, ONE_ROW)
- control-unrounded: the fused kernel multiplying by the norm weight before rounding the
  normalised value to bf16 (transformers rounds first), or by up before rounding silu(gate):
  the comparison must flag it

Per arm and cell: the time per call in a CUDA Graph (L2 warm; `bench.timing.graph_median_us`)
and whether the output (and the stored residual sum) equals the shipped arm's. On a CPU
(`--device cpu`, Triton's interpreter) it checks the bits only, at small shapes: the unit test
runs that.

Measured (H200, 2026-12-04, docs/evidence/h200-2026-12-04-i-fused-norm-sweep/): the fused arm
kept the bits in every cell. Rounding all 16 tile rows in every program it lost 10x; rounding
only the live row at M = 1 (ONE_ROW) it wins on gate_up (29.60 -> 27.60 us) and loses on qkv
(9.79 -> 12.11 us), where one partial wave of programs cannot hide the prologue. The down
cell has not run on a GPU yet.

Developer tool: writes fused_norm_gemm.json and fused_norm_gemm.md into OUT_DIR.
    python tools/fused_norm_gemm_sweep.py OUT_DIR [--ms 1,4,16] [--fused-stages N]
        [--device cuda|cpu]
A winning arm moves into det_suite (a kernel in kernels/, a prologue mode in the GEMM's launch
spec, the model's norm-then-linear path) with an H200 evidence run: all result dependencies.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path


from det_suite.bench.sweep_cli import (add_device_option, control_verdict, cpu_requested,
                                       finish, int_list, same_bits, wants_gpu)

if __name__ == "__main__" and cpu_requested(sys.argv[1:]):
    # The interpreter must be chosen before Triton is imported (platform/interpreter.py).
    from det_suite.platform.interpreter import use_interpreter
    use_interpreter()

import torch  # noqa: E402 - after the interpreter switch
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from det_suite.kernels.fp8_constants import FP8_E4M3_MAX  # noqa: E402
from det_suite.kernels.bi_mul_quantize import _silu  # noqa: E402
from det_suite.kernels.fp8_epilogue import (  # noqa: E402
    finish_split_k_tile, segment_of, store_scaled_tile)
from det_suite.kernels.fp8_quantize import _widen_to_fp32, quantize_to_e4m3_grid  # noqa: E402
from det_suite.kernels.grid_dependency import wait_for_previous_grid  # noqa: E402
from det_suite.kernels.rmsnorm_row import rms_inverse_of, row_values  # noqa: E402
from det_suite.kernels.tile_order import grouped_tile_coordinates  # noqa: E402
from det_suite.ops.bi_launch_spec import RMSNORM_QUANTIZE_TILE  # noqa: E402
from det_suite.ops.launch import launch_fp8_gemm  # noqa: E402
from det_suite.ops.linear import device_policy  # noqa: E402
from det_suite.ops.quantized_inputs import (  # noqa: E402
    add_rms_norm_quantized_stacked, silu_mul_quantized)
from det_suite.policy import shipped_policy  # noqa: E402

GEMM_KERNEL = "fp8_scaled_mm_swap_ab_kernel"
# (name, column segments, K, producer): a norm before q/k/v and gate/up, the SiLU product
# before down.
QWEN3_8B = (("qkv", (4096, 1024, 1024), 4096, "norm"),
            ("gate_up", (12288, 12288), 4096, "norm"), ("down", (4096,), 12288, "silu"))
# Small enough for the interpreter, with the same structure (three / two segments).
# down at K = 8192: the SM90 table splits it (4 x 2048 through the workspace), as Qwen3-8B's.
CPU_SHAPES = (("qkv", (128, 64, 64), 320, "norm"), ("gate_up", (128, 128), 320, "norm"),
              ("down", (128,), 8192, "silu"))
ARMS = ("shipped", "fused", "control-unrounded")
CONTROL = "control-unrounded"
EPS = 1e-6


@triton.jit
def _normed_quantized(value, inv_rms, weight_n, q_scale, FP8_MAX: tl.constexpr,
                      ROUND_NORMED: tl.constexpr):
    """The e4m3 grid values (fp32) of rms_norm(value) * weight_n / q_scale, as
    bi_rmsnorm_quantize_kernel rounds them (`rms_apply`, then `quantize_to_e4m3_grid`)."""
    h = value.to(tl.float32) * inv_rms
    if ROUND_NORMED:   # rms_apply's order: round to the dtype, then the weight
        normed = (weight_n * h.to(value.dtype).to(tl.float32)).to(value.dtype)
    else:              # the positive control: the weight applied before any rounding
        normed = (weight_n * h).to(value.dtype)
    return quantize_to_e4m3_grid(normed.to(tl.float32), q_scale, FP8_MAX)


@triton.jit
def _silu_product_quantized(gate, up, q_scale, FP8_MAX: tl.constexpr,
                            ROUND_SILU: tl.constexpr):
    """The e4m3 grid values (fp32) of silu(gate) * up / q_scale, as bi_mul_quantize_kernel
    rounds them (silu rounded to the dtype, the product rounded to it, then quantized)."""
    silu = _silu(_widen_to_fp32(gate))
    if ROUND_SILU:     # torch stores silu(gate) before multiplying
        silu = silu.to(gate.dtype).to(tl.float32)
    product = (silu * _widen_to_fp32(up)).to(gate.dtype)
    return quantize_to_e4m3_grid(product, q_scale, FP8_MAX)


@triton.jit(do_not_specialize=["M"])
def norm_quantize_gemm_kernel(
    a_desc, b_desc, out_ptr, partials_ptr, counters_ptr, bias_ptr, a_scale_ptr, b_scale_ptr,
    M, N, K, K_CHUNK, SEG_END0, SEG_END1,
    stride_ps, stride_pm, stride_pn,
    stride_om, stride_on,
    b_ptr, stride_bn,
    x_ptr, delta_ptr, norm_weight_ptr, sum_ptr,
    stride_xm, stride_dm, stride_sm,
    eps,
    HAS_BIAS: tl.constexpr,
    SPLIT_K: tl.constexpr,
    WRITE_PARTIALS: tl.constexpr,
    FUSED_FIXUP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    USE_PDL: tl.constexpr,
    PROMOTE_K: tl.constexpr,
    SEGMENTS: tl.constexpr,
    PREFETCH_K: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK_H: tl.constexpr,
    FP8_MAX: tl.constexpr,
    ROUND_NORMED: tl.constexpr,
    ONE_ROW: tl.constexpr = False,
    SILU_PRODUCT: tl.constexpr = False,
):
    """`fp8_scaled_mm_swap_ab_kernel`'s parameters (a_desc is never read) plus the norm's:
    out = fp8_gemm(quantize(rms_norm(x + delta) * norm_weight, a_scale[segment])), and
    sum = x + delta stored by the row tile's first column program. SILU_PRODUCT: the input is
    instead quantize(silu(x) * delta) (x the gate rows, delta the up rows; no norm, no sum).
    ONE_ROW (M == 1, a batch-1 decode): only row 0 is rounded, as a 1-D row broadcast into
    the tile's live row; the padding rows are zeros without arithmetic. Single pass, or
    split-K through the workspace with the fused fix-up (`fp8_tma_program`'s order).
    ROUND_NORMED False (the positive control) skips the rounding the shipped producer does
    before its weight (norm) or product (SiLU) multiply."""
    tl.static_assert((SPLIT_K == 1) | WRITE_PARTIALS)
    pid_m, pid_n = grouped_tile_coordinates(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    wait_for_previous_grid(USE_PDL)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_exists = offs_m < M
    # Each row's 1/rms exactly as bi_rmsnorm_quantize_kernel computes it; rows past M keep 0
    # and quantize to zeros that are never stored.
    inv_rms = tl.zeros((BLOCK_M,), dtype=tl.float32)
    rows_to_norm = tl.minimum(off_m + BLOCK_M, M)
    if SILU_PRODUCT:
        rows_to_norm = off_m
    for r in range(off_m, rows_to_norm):
        row_inv = rms_inverse_of(x_ptr + r * stride_xm, delta_ptr + r * stride_dm, K, eps,
                                 BLOCK_H, HAS_RESIDUAL)
        inv_rms = tl.where(offs_m == r, row_inv, inv_rms)
    seg = 0
    if SEGMENTS > 1:
        seg = segment_of(off_n, SEG_END0, SEG_END1, SEGMENTS)
    q_scale = tl.load(a_scale_ptr + seg)
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    delta_rows = delta_ptr + offs_m[:, None] * stride_dm
    acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    row0_inv = tl.sum(tl.where(offs_m == off_m, inv_rms, 0.0), axis=0)  # exact: one term
    k_begin = 0
    k_end = K
    if WRITE_PARTIALS:
        k_begin = tl.program_id(1) * K_CHUNK
        k_end = tl.minimum(k_begin + K_CHUNK, K)
    for k0 in range(k_begin, k_end, BLOCK_K):
        cols = k0 + offs_k
        col_exists = cols < K
        if SILU_PRODUCT:
            if ONE_ROW:
                gate = tl.load(x_ptr + off_m * stride_xm + cols, mask=col_exists, other=0.0)
                up = tl.load(delta_ptr + off_m * stride_dm + cols, mask=col_exists, other=0.0)
                row = _silu_product_quantized(gate, up, q_scale, FP8_MAX, ROUND_NORMED)
                act = tl.where((offs_m == off_m)[:, None], row[None, :], 0.0)
            else:
                in_rows = row_exists[:, None] & col_exists[None, :]
                gate = tl.load(x_rows + cols[None, :], mask=in_rows, other=0.0)
                up = tl.load(delta_rows + cols[None, :], mask=in_rows, other=0.0)
                act = _silu_product_quantized(gate, up, q_scale, FP8_MAX, ROUND_NORMED)
            act = act.to(tl.float8e4nv)
        elif ONE_ROW:
            weight_n = tl.load(norm_weight_ptr + cols, mask=col_exists, other=0.0).to(tl.float32)
            value = row_values(x_ptr + off_m * stride_xm, delta_ptr + off_m * stride_dm, cols,
                               col_exists, HAS_RESIDUAL)
            if HAS_RESIDUAL:
                if pid_n == 0:
                    tl.store(sum_ptr + off_m * stride_sm + cols, value, mask=col_exists)
            row = _normed_quantized(value, row0_inv, weight_n, q_scale, FP8_MAX, ROUND_NORMED)
            act = tl.where((offs_m == off_m)[:, None], row[None, :], 0.0).to(tl.float8e4nv)
        else:
            weight_n = tl.load(norm_weight_ptr + cols, mask=col_exists, other=0.0).to(tl.float32)
            in_rows = row_exists[:, None] & col_exists[None, :]
            value = row_values(x_rows, delta_rows, cols[None, :], in_rows, HAS_RESIDUAL)
            if HAS_RESIDUAL:
                if pid_n == 0:
                    tl.store(sum_ptr + offs_m[:, None] * stride_sm + cols[None, :], value,
                             mask=in_rows)
            act = _normed_quantized(value, inv_rms[:, None], weight_n[None, :], q_scale,
                                    FP8_MAX, ROUND_NORMED).to(tl.float8e4nv)
        weight = b_desc.load([off_n, k0])
        acc_t = tl.dot(weight, act.T, acc_t, max_num_imprecise_acc=PROMOTE_K)
    acc = tl.trans(acc_t)
    if WRITE_PARTIALS:
        partial_ptrs = partials_ptr + offs_m[:, None] * stride_pm + offs_n[None, :] * stride_pn
        tl.store(partial_ptrs + tl.program_id(1) * stride_ps, acc,
                 mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])
        if FUSED_FIXUP:
            finish_split_k_tile(partial_ptrs, stride_ps, counters_ptr + tl.program_id(0), out_ptr,
                                bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N,
                                stride_om, stride_on, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N,
                                SEG_END0, SEG_END1, SEGMENTS)
    else:
        store_scaled_tile(acc, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M,
                          N, stride_om, stride_on, HAS_BIAS, SEG_END0, SEG_END1, SEGMENTS)


def _launch_fused(x, extra: dict, weight, a_scales, w_scales, segment_ends, config, *,
                  out_dtype, options: dict | None):
    """The segmented FP8 GEMM of `weight` (N, K) at `config` (a swapped decode tile), launched
    as `norm_quantize_gemm_kernel` with `extra` (its prologue's arguments)."""
    m, k = x.shape
    # The descriptor the GEMM's spec binds is built from this buffer; never read.
    unread = torch.empty(((len(segment_ends) + 1) * m, k), dtype=torch.float8_e4m3fn,
                         device=x.device)
    options = dict(options or {})

    def launcher(kernel, call, args, keywords):
        if call.kernel != GEMM_KERNEL:
            raise RuntimeError(f"the fused launch needs the swapped decode tile; the table "
                               f"chose {call.kernel} (M={m})")
        return norm_quantize_gemm_kernel[call.grid](*args, **extra, **{**keywords, **options})

    out = torch.empty((m, weight.shape[0]), dtype=out_dtype, device=x.device)
    return launch_fp8_gemm(unread, weight.t(), a_scales, w_scales, None, out, config,
                           segment_ends=tuple(segment_ends), launcher=launcher)


def norm_quantize_gemm(x, delta, norm_weight, eps: float, weight, a_scales, w_scales,
                       segment_ends, config, *, summed=None, out_dtype=torch.bfloat16,
                       round_normed: bool = True, options: dict | None = None):
    """out (M, N) = the segmented FP8 GEMM of `weight` (N, K) on
    quantize(rms_norm(x + delta) * norm_weight, a_scales[segment]), from one launch; with
    delta, x + delta is also stored to `summed` (allocated when None). Returns (out, summed):
    summed is x itself without delta. `options` override the tile's launch options."""
    has_residual = delta is not None
    if has_residual and summed is None:
        summed = torch.empty_like(x)
    delta_rows = delta if has_residual else x
    summed_rows = summed if has_residual else x
    extra = dict(x_ptr=x, delta_ptr=delta_rows, norm_weight_ptr=norm_weight,
                 sum_ptr=summed_rows, stride_xm=x.stride(0), stride_dm=delta_rows.stride(0),
                 stride_sm=summed_rows.stride(0), eps=eps, HAS_RESIDUAL=has_residual,
                 BLOCK_H=RMSNORM_QUANTIZE_TILE["BLOCK_H"], FP8_MAX=FP8_E4M3_MAX,
                 ROUND_NORMED=round_normed, ONE_ROW=x.shape[0] == 1)
    out = _launch_fused(x, extra, weight, a_scales, w_scales, segment_ends, config,
                        out_dtype=out_dtype, options=options)
    return out, (summed if has_residual else x)


def silu_mul_quantize_gemm(gate, up, weight, a_scale, w_scale, config, *,
                           out_dtype=torch.bfloat16, round_silu: bool = True,
                           options: dict | None = None):
    """out (M, N) = fp8_gemm(quantize(silu(gate) * up, a_scale)) for gate and up (M, K) rows
    of one dtype (the two halves of a gate|up output), from one launch. Launched, as
    `bi_mul_quantize_kernel` is, with libdevice's exp without its flush-to-zero variant."""
    extra = dict(x_ptr=gate, delta_ptr=up, norm_weight_ptr=gate, sum_ptr=gate,
                 stride_xm=gate.stride(0), stride_dm=up.stride(0), stride_sm=gate.stride(0),
                 eps=0.0, HAS_RESIDUAL=False, BLOCK_H=RMSNORM_QUANTIZE_TILE["BLOCK_H"],
                 FP8_MAX=FP8_E4M3_MAX, ROUND_NORMED=round_silu, ONE_ROW=gate.shape[0] == 1,
                 SILU_PRODUCT=True)
    return _launch_fused(gate, extra, weight, a_scale, w_scale, (), config,
                         out_dtype=out_dtype,
                         options={"enable_reflect_ftz": False, **(options or {})})


def segment_ends(widths) -> tuple[int, ...]:
    """Where each column segment but the last ends (`fp8_scaled_mm_segmented`'s ends)."""
    return tuple(itertools.accumulate(widths))[:-1]


def fuses(config) -> bool:
    """Whether the fused launches can run at this launch config: the swapped decode tile,
    single pass or split-K with the fused fix-up."""
    return bool(config.swap_ab and config.use_tma
                and (config.split_k == 1 or (config.use_workspace and config.fused_fixup)))


class Cell:
    """One producer-then-linear of a decode step: a FP8 weight (N, K) with `segments` column
    widths, one input and one weight scale per segment, the table's launch config at M rows.
    Subclasses draw the producer's inputs (`_inputs`, first, from the cell's generator) and
    make its two launches."""

    def __init__(self, segments, k: int, m: int, device, seed: int = 0,
                 fused_options: dict | None = None):
        g = torch.Generator().manual_seed(seed)
        n = sum(segments)
        self.segments, self.m, self.k, self.n = tuple(segments), m, k, n
        self.fused_options = dict(fused_options or {})
        self._inputs(g, seed, device)
        self.weight = (torch.randn(n, k, generator=g) * 0.5).to(torch.float8_e4m3fn).to(device)
        s = len(segments)
        self.a_scales = (0.02 + 0.01 * torch.rand(s, generator=g)).to(device)
        self.w_scales = (0.01 + 0.01 * torch.rand(s, generator=g)).to(device)
        # One view per scale, kept: the ops validate a scale tensor once, before capture.
        self.scale_views = list(self.a_scales.unbind(0))
        self.ends = segment_ends(segments)
        # The device's table on a GPU; on the CPU the SM90 one, whose decode tiles are the
        # swapped TMA kernel this prototype extends.
        device = torch.device(device)
        table = None if device.type == "cuda" else shipped_policy("sm90")
        self.config = device_policy(device, table).select(m, n, k)

    def _gemm(self, a):
        out = torch.empty((self.m, self.n), dtype=torch.bfloat16, device=self.weight.device)
        return launch_fp8_gemm(a, self.weight.t(), self.a_scales, self.w_scales, None, out,
                               self.config, segment_ends=self.ends)

    def _inputs(self, g, seed: int, device) -> None:
        raise NotImplementedError

    def shipped(self):
        """(output, the second tensor the comparison checks) of the two shipped launches."""
        raise NotImplementedError

    def fused(self, round_normed: bool = True):
        """The same pair from the one fused launch."""
        raise NotImplementedError

    def run(self, arm: str):
        if arm == "shipped":
            return self.shipped()
        return self.fused(round_normed=arm != CONTROL)


class NormCell(Cell):
    """A norm before q/k/v or gate/up: M rows of x and delta (bf16, K), the norm's weight;
    the second tensor compared is the stored residual sum x + delta."""

    def _inputs(self, g, seed: int, device) -> None:
        m, k = self.m, self.k
        self.x = torch.randn(m, k, generator=g).to(torch.bfloat16).to(device)
        self.delta = torch.randn(m, k, generator=g).to(torch.bfloat16).to(device)
        self.norm_weight = (1 + 0.1 * torch.randn(k, generator=g)).to(torch.bfloat16).to(device)

    def shipped(self):
        summed, stacked = add_rms_norm_quantized_stacked(
            self.x, self.delta, self.norm_weight, EPS, self.scale_views)
        return self._gemm(stacked.reshape(-1, self.k)), summed

    def fused(self, round_normed: bool = True):
        return norm_quantize_gemm(self.x, self.delta, self.norm_weight, EPS, self.weight,
                                  self.a_scales, self.w_scales, self.ends, self.config,
                                  round_normed=round_normed, options=self.fused_options)


class GatedCell(Cell):
    """The down projection's input: silu(gate) * up of M rows (the two halves of a gate|up
    output, rows strided by 2K), quantized with one input scale; the second tensor compared
    is the gate|up rows, which neither launch may write."""

    def _inputs(self, g, seed: int, device) -> None:
        m, k = self.m, self.k
        own = torch.Generator().manual_seed(seed + 1)
        self.gate_up = torch.randn(m, 2 * k, generator=own).to(torch.bfloat16).to(device)
        self.gate, self.up = self.gate_up[:, :k], self.gate_up[:, k:]

    def shipped(self):
        q = silu_mul_quantized(self.gate, self.up, self.scale_views[0])
        return self._gemm(q), self.gate_up

    def fused(self, round_normed: bool = True):
        out = silu_mul_quantize_gemm(self.gate, self.up, self.weight, self.a_scales,
                                     self.w_scales, self.config, round_silu=round_normed,
                                     options=self.fused_options)
        return out, self.gate_up


CELLS = {"norm": NormCell, "silu": GatedCell}


def compare_arms(cell: Cell, arms) -> dict[str, dict]:
    """Per arm: whether its output and residual sum equal the shipped arm's (torch.equal),
    and how many output elements differ."""
    out, summed = cell.shipped()
    result = {}
    for arm in arms:
        arm_out, arm_sum = cell.run(arm)
        result[arm] = {"equal": bool(torch.equal(arm_out, out) and torch.equal(arm_sum, summed)),
                       "differing_elements": int((arm_out != out).sum())}
    return result


def _markdown(payload: dict) -> str:
    lines = [f"# Fused norm + quantize + decode GEMM ({payload['device']})", "",
             "Times: one call (shipped: the norm launch and the GEMM launch), median of CUDA "
             "Graph replays; x36: a Qwen3-8B decode step's 36 layers.", "",
             "| shape | M | arm | same bits as shipped | graph us (x36) |",
             "| --- | --- | --- | --- | --- |"]
    for cell in payload["cells"]:
        for arm, row in cell["arms"].items():
            same = same_bits(row)
            t = row.get("graph_us")
            timing = f"{t:.2f} ({36 * t:.0f})" if t is not None else "not timed"
            lines.append(f"| {cell['shape']} | {cell['m']} | {arm} | {same} | {timing} |")
    lines += ["", control_verdict(CONTROL, payload["control_flagged"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--ms", type=int_list, default=None,
                        help="rows per call (default 1,4,16 on a GPU, 1,3 on CPU)")
    parser.add_argument("--fused-stages", type=int, default=None,
                        help="pipeline depth of the fused kernel (default: the GEMM tile's)")
    add_device_option(parser)
    args = parser.parse_args(argv)
    fused_options = {} if args.fused_stages is None else {"num_stages": args.fused_stages}
    gpu = wants_gpu(parser, args)
    ms = args.ms or ([1, 4, 16] if gpu else [1, 3])
    cells = []
    for shape, segments, k, producer in (QWEN3_8B if gpu else CPU_SHAPES):
        for m in ms:
            cell = CELLS[producer](segments, k, m, args.device, fused_options=fused_options)
            rows = compare_arms(cell, ARMS)
            for arm in ARMS:
                if gpu and arm != CONTROL:
                    from det_suite.bench.timing import graph_median_us
                    rows[arm]["graph_us"] = graph_median_us(lambda a=arm: cell.run(a))
                same = "same bits" if rows[arm]["equal"] else "DIFFERENT bits"
                timing = rows[arm].get("graph_us")
                print(f"{shape} M={m} {arm}: {same}"
                      + (f", {timing:.2f} us" if timing is not None else ""), flush=True)
            cells.append({"shape": shape, "segments": list(segments), "k": k, "m": m,
                          "arms": rows})
    payload = {
        "kind": "fused-norm-gemm-sweep",
        "device": torch.cuda.get_device_name() if gpu else "cpu (Triton interpreter)",
        "torch": torch.__version__, "triton": triton.__version__,
        "fused_options": fused_options,
        "control_flagged": all(not c["arms"][CONTROL]["equal"] for c in cells),
        "candidates_equal": all(c["arms"]["fused"]["equal"] for c in cells),
        "cells": cells,
    }
    return finish(args.out_dir, "fused_norm_gemm", payload, _markdown(payload),
                  candidates="the fused arm")


if __name__ == "__main__":
    raise SystemExit(main())
