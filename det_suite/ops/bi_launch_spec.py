"""How the batch-invariant ops (`ops.batch_invariant`) launch their kernels, as data.

Each op has ONE tile, the same for every number of rows or queries: the tile is what fixes
the reduction order and, for the two kernels that feed tensor cores, the MMA instruction.
On SM90 a BLOCK_M (BLOCK_Q) of 64 with 4 warps is a wgmma tile and 16/32 an mma.sync one
(docs: design.md), so a tile chosen by M would mix two instructions; nothing here looks at
M except the grid. Everything else may depend on the shape's fixed dimensions only.

One exception, by design: attention launches decode calls (T == R) in a split shape (a
program per KV segment, then an ordered merge) and other calls in its tile kernel. Both
shapes have the same tile (BLOCK_Q, BLOCK_KV, SEGMENT) and warps, and reduce a query in the
same order, so the choice moves work between programs, never a query's bits.

Like `ops.launch_spec`, a description here is what both the launcher and the instruction
lint (`lint.op_kernels`) bind, so the lint compiles exactly what runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton

from det_suite.kernels.fp8_constants import FP8_E4M3_MAX
from det_suite.kernels.grid_dependency import RELEASE_FIRST
from det_suite.ops.launch_spec import KernelCall, LaunchArg, triton_cdiv


@dataclass(frozen=True)
class OpTile:
    """One op's launch parameters: its kernel's tile constexprs and compile options."""

    kernel: str
    tile: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int

    @property
    def options(self) -> tuple[tuple[str, object], ...]:
        return (("num_warps", self.num_warps), ("num_stages", self.num_stages))

    def __getitem__(self, name: str) -> int:
        return dict(self.tile)[name]


# The tile policy of the batch-invariant ops: one entry per op, for every GPU family.
MATMUL_TILE = OpTile("bi_matmul_kernel",
                     (("BLOCK_M", 64), ("BLOCK_N", 128), ("BLOCK_K", 64)), 4, 3)
RMSNORM_TILE = OpTile("bi_rmsnorm_kernel", (("BLOCK_H", 1024),), 4, 1)
# log_softmax cuts a row into SLICE_V-position slices (a constant: the split depends on V
# only), each reduced by one program (bi_log_softmax_partials_kernel) in BLOCK_V lanes, then
# merged by every program of the row before it writes its slice (bi_log_softmax_kernel).
LOG_SOFTMAX_TILE = OpTile("bi_log_softmax_kernel", (("SLICE_V", 4096), ("BLOCK_V", 4096)), 8, 1)
LOG_SOFTMAX_PARTIALS_TILE = OpTile("bi_log_softmax_partials_kernel", LOG_SOFTMAX_TILE.tile,
                                   LOG_SOFTMAX_TILE.num_warps, LOG_SOFTMAX_TILE.num_stages)
# Attention reduces a query's keys in SEGMENT-sized segments of BLOCK_KV tiles (a multiple
# of it), whichever of its two launch shapes runs: the split shape's partial kernel has the
# tile kernel's whole tile and warps (one MMA instruction, one reduction); its combine
# merges by SEGMENT.
ATTENTION_TILE = OpTile("bi_paged_attention_kernel",
                        (("BLOCK_Q", 64), ("BLOCK_KV", 64), ("SEGMENT", 256)), 4, 2)
ATTENTION_SPLIT_TILE = OpTile("bi_paged_attention_split_kernel", ATTENTION_TILE.tile,
                              ATTENTION_TILE.num_warps, ATTENTION_TILE.num_stages)
ATTENTION_COMBINE_TILE = OpTile("bi_paged_attention_combine_kernel",
                                (("SEGMENT", ATTENTION_TILE["SEGMENT"]),), 1, 1)
# The norm that feeds FP8 linears must reproduce the norm's bits: the same tile and warps.
RMSNORM_QUANTIZE_TILE = OpTile("bi_rmsnorm_quantize_kernel", RMSNORM_TILE.tile,
                               RMSNORM_TILE.num_warps, RMSNORM_TILE.num_stages)
MUL_QUANTIZE_TILE = OpTile("bi_mul_quantize_kernel", (("BLOCK_N", 1024),), 4, 1)
# q/k norm + RoPE + KV write: its norms must be bi_rmsnorm_kernel's bits, so its tile too.
QK_NORM_ROPE_TILE = OpTile("bi_qk_norm_rope_kernel", RMSNORM_TILE.tile,
                           RMSNORM_TILE.num_warps, RMSNORM_TILE.num_stages)
OP_TILES = (MATMUL_TILE, RMSNORM_TILE, LOG_SOFTMAX_TILE, LOG_SOFTMAX_PARTIALS_TILE,
            ATTENTION_TILE, RMSNORM_QUANTIZE_TILE,
            MUL_QUANTIZE_TILE, QK_NORM_ROPE_TILE, ATTENTION_SPLIT_TILE, ATTENTION_COMBINE_TILE)
MAX_QUANTIZED_OUTPUTS = 3   # a layer's q, k and v projections


def pdl_launch(pdl: bool | int) -> tuple[tuple[tuple[str, object], ...],
                                         tuple[tuple[str, object], ...]]:
    """(constexprs, options) of a launch with or without programmatic dependent launch:
    the kernel's USE_PDL (it waits for the previous grid before touching memory,
    `kernels.grid_dependency`; `RELEASE_FIRST` releases the next launch before it waits)
    and Triton's launch_pdl, always set together so the lint compiles the wait wherever the
    launch may overlap its predecessor."""
    use_pdl = RELEASE_FIRST if pdl == RELEASE_FIRST else bool(pdl)
    return (("USE_PDL", use_pdl),), (("launch_pdl", bool(pdl)),)


def _tensor(role):
    return LaunchArg("tensor", role=role)


def _stride(role, dim):
    return LaunchArg("stride", role=role, dim=dim)


def _value(value):
    return LaunchArg("int", value=value)  # "int": a literal runtime value (eps/scale: float)


def matmul_launch_spec(m: int, n: int, k: int, *, has_bias: bool,
                       pdl: bool | int = False) -> KernelCall:
    """out (m, n) = x (m, k) @ w (n, k).T (+ bias): roles x, w, bias, out. pdl: launched
    with programmatic dependent launch (`pdl_launch`), as every spec's `pdl`."""
    t = MATMUL_TILE
    pdl_constexprs, pdl_options = pdl_launch(pdl)
    return KernelCall(
        t.kernel, (triton_cdiv(m, t["BLOCK_M"]), triton_cdiv(n, t["BLOCK_N"])),
        (("x_ptr", _tensor("x")), ("w_ptr", _tensor("w")),
         ("bias_ptr", _tensor("bias" if has_bias else "w")),  # never read without bias
         ("out_ptr", _tensor("out")), ("M", _value(m)), ("N", _value(n)), ("K", _value(k)),
         ("stride_xm", _stride("x", 0)), ("stride_xk", _stride("x", 1)),
         ("stride_wn", _stride("w", 0)), ("stride_wk", _stride("w", 1)),
         ("stride_om", _stride("out", 0)), ("stride_on", _stride("out", 1))),
        (("HAS_BIAS", has_bias), *t.tile, *pdl_constexprs), (*t.options, *pdl_options))


def rmsnorm_launch_spec(m: int, h: int, eps: float, *, pdl: bool | int = False) -> KernelCall:
    """One program per row of x (m, h): roles x, weight, out."""
    t = RMSNORM_TILE
    pdl_constexprs, pdl_options = pdl_launch(pdl)
    return KernelCall(
        t.kernel, (m,),
        (("x_ptr", _tensor("x")), ("weight_ptr", _tensor("weight")), ("out_ptr", _tensor("out")),
         ("H", _value(h)), ("stride_xm", _stride("x", 0)), ("stride_om", _stride("out", 0)),
         ("eps", _value(float(eps)))),
        (*t.tile, *pdl_constexprs), (*t.options, *pdl_options))


def rmsnorm_quantize_launch_spec(m: int, h: int, eps: float, outputs: int, *,
                                 residual: bool = False, pdl: bool | int = False) -> KernelCall:
    """Programs (row, BLOCK_H columns) over x (m, h), quantized for `outputs` (1..3)
    linears: roles x, weight, q0.. and scale0.. (the unused ones bound to q0 / scale0,
    never read); with `residual` also delta and summed (m, h), the norm taking x + delta
    and storing it to summed (without, both bound to x, never read or written)."""
    if not 1 <= outputs <= MAX_QUANTIZED_OUTPUTS:
        raise ValueError(f"outputs: expected 1..{MAX_QUANTIZED_OUTPUTS}, got {outputs}")
    t = RMSNORM_QUANTIZE_TILE
    pdl_constexprs, pdl_options = pdl_launch(pdl)
    q = [f"q{i}" if i < outputs else "q0" for i in range(MAX_QUANTIZED_OUTPUTS)]
    scale = [f"scale{i}" if i < outputs else "scale0" for i in range(MAX_QUANTIZED_OUTPUTS)]
    delta, summed = ("delta", "summed") if residual else ("x", "x")
    return KernelCall(
        t.kernel, (m, triton_cdiv(h, t["BLOCK_H"])),
        (("x_ptr", _tensor("x")), ("delta_ptr", _tensor(delta)),
         ("weight_ptr", _tensor("weight")), ("sum_ptr", _tensor(summed)),
         *((f"q{i}_ptr", _tensor(q[i])) for i in range(MAX_QUANTIZED_OUTPUTS)),
         *((f"scale{i}_ptr", _tensor(scale[i])) for i in range(MAX_QUANTIZED_OUTPUTS)),
         ("H", _value(h)), ("stride_xm", _stride("x", 0)), ("stride_dm", _stride(delta, 0)),
         ("stride_sm", _stride(summed, 0)), ("stride_qm", _stride("q0", 0)),
         ("eps", _value(float(eps)))),
        (("NUM_OUT", outputs), ("HAS_RESIDUAL", bool(residual)), ("FP8_MAX", FP8_E4M3_MAX),
         *t.tile, *pdl_constexprs), (*t.options, *pdl_options))


def mul_quantize_launch_spec(m: int, n: int, *, silu_a: bool = False,
                             pdl: bool | int = False) -> KernelCall:
    """q (m, n) fp8 = quantize(a * b), with silu_a quantize(silu(a) * b): roles a, b, q,
    scale (a and b rows of any row stride, e.g. the two halves of one gate|up tensor)."""
    t = MUL_QUANTIZE_TILE
    pdl_constexprs, pdl_options = pdl_launch(pdl)
    # libdevice without its flush-to-zero variant (Triton's default takes it): nvcc builds
    # torch's silu with -ftz=false, so this is the expf torch's kernel runs.
    options = (*t.options, ("enable_reflect_ftz", False), *pdl_options)
    return KernelCall(
        t.kernel, (m, triton_cdiv(n, t["BLOCK_N"])),
        (("a_ptr", _tensor("a")), ("b_ptr", _tensor("b")), ("q_ptr", _tensor("q")),
         ("scale_ptr", _tensor("scale")), ("N", _value(n)), ("stride_am", _stride("a", 0)),
         ("stride_bm", _stride("b", 0)), ("stride_qm", _stride("q", 0))),
        (("SILU_A", bool(silu_a)), ("FP8_MAX", FP8_E4M3_MAX), *t.tile, *pdl_constexprs),
        options)


def log_softmax_slices(v: int) -> int:
    """How many SLICE_V-position slices a row of V logits is cut into."""
    return triton_cdiv(v, LOG_SOFTMAX_TILE["SLICE_V"])


def log_softmax_stats_shape(m: int, v: int) -> tuple[int, int, int]:
    """The fp32 workspace (role "stats"): per row and slice its (max, sum)."""
    return (m, log_softmax_slices(v), 2)


def log_softmax_launch_spec(m: int, v: int, *, pdl: bool | int = False
                            ) -> tuple[KernelCall, KernelCall]:
    """Two launches over (row, slice) programs of x (m, v): the slices' (max, sum) into the
    workspace, then the merge and the output. Roles x, stats (`log_softmax_stats_shape`),
    out."""
    grid = (m, log_softmax_slices(v))
    pdl_constexprs, pdl_options = pdl_launch(pdl)
    partials = LOG_SOFTMAX_PARTIALS_TILE
    finish = LOG_SOFTMAX_TILE
    slots = triton.next_power_of_2(log_softmax_slices(v))  # tl.arange needs a power of two
    return (
        KernelCall(
            partials.kernel, grid,
            (("x_ptr", _tensor("x")), ("stats_ptr", _tensor("stats")), ("V", _value(v)),
             ("stride_xm", _stride("x", 0)), ("stride_sm", _stride("stats", 0))),
            (*partials.tile, *pdl_constexprs), (*partials.options, *pdl_options)),
        KernelCall(
            finish.kernel, grid,
            (("x_ptr", _tensor("x")), ("stats_ptr", _tensor("stats")),
             ("out_ptr", _tensor("out")), ("V", _value(v)), ("stride_xm", _stride("x", 0)),
             ("stride_sm", _stride("stats", 0)), ("stride_om", _stride("out", 0))),
            (*finish.tile, ("SLICES", slots), *pdl_constexprs),
            (*finish.options, *pdl_options)))


def _attention_inputs(num_requests: int, block_size: int, scale: float) -> tuple:
    """The arguments the two kernels that read the cache (the tile kernel, the split
    shape's partial kernel) take first, in their order: q, the caches, the requests'
    metadata, the softmax scale and the strides of all of them."""
    return (
        ("q_ptr", _tensor("q")), ("k_cache_ptr", _tensor("k_cache")),
        ("v_cache_ptr", _tensor("v_cache")),
        ("block_tables_ptr", _tensor("block_tables")),
        ("context_lens_ptr", _tensor("context_lens")),
        ("query_starts_ptr", _tensor("query_starts")),
        ("scale", _value(float(scale))), ("num_requests", _value(num_requests)),
        ("block_size", _value(block_size)),
        ("stride_qt", _stride("q", 0)), ("stride_qh", _stride("q", 1)),
        ("stride_kb", _stride("k_cache", 0)), ("stride_ks", _stride("k_cache", 1)),
        ("stride_kh", _stride("k_cache", 2)),
        ("stride_vb", _stride("v_cache", 0)), ("stride_vs", _stride("v_cache", 1)),
        ("stride_vh", _stride("v_cache", 2)),
        ("stride_bt", _stride("block_tables", 0)))


def _attention_output(quantize_out: bool) -> tuple:
    """The output arguments of the kernel that ends the op (the tile kernel, the combine):
    out, and out_scale when it quantizes (otherwise bound to out, never read)."""
    return (("out_ptr", _tensor("out")),
            ("out_scale_ptr", _tensor("out_scale" if quantize_out else "out")),
            ("stride_ot", _stride("out", 0)), ("stride_oh", _stride("out", 1)))


def _attention_epilogue(quantize_out: bool) -> tuple:
    """The output kernel's epilogue constexprs: whether it quantizes, and the clamp."""
    return (("QUANTIZE_OUT", quantize_out), ("FP8_MAX", FP8_E4M3_MAX))


def attention_launch_spec(num_tokens: int, num_requests: int, num_q_heads: int,
                          num_kv_heads: int, head_dim: int, block_size: int,
                          scale: float, *, quantize_out: bool = False) -> KernelCall:
    """Roles q (T, Hq, D), k_cache / v_cache (blocks, block_size, Hkv, D),
    block_tables (R, max_blocks), context_lens (R,), query_starts (R + 1,), out (T, Hq, D)
    in q's dtype or, with quantize_out, float8_e4m3fn quantized with out_scale (1,) fp32.
    quantize_out changes the epilogue only, never the tile."""
    t = ATTENTION_TILE
    grid = (num_tokens // t["BLOCK_Q"] + num_requests, num_q_heads)
    return KernelCall(
        t.kernel, grid,
        (*_attention_inputs(num_requests, block_size, scale), *_attention_output(quantize_out)),
        (("GROUP", num_q_heads // num_kv_heads), ("HEAD_DIM", head_dim), *t.tile,
         *_attention_epilogue(quantize_out)), t.options)


def attention_splits_kv(num_tokens: int, num_requests: int) -> bool:
    """Whether `paged_attention` launches the split shape: for decode calls (one query per
    request, seen from the shapes alone as T == R), where the tile kernel would run one
    program per head over the whole context. Either shape computes the same bits."""
    return num_tokens == num_requests


def attention_segments(block_size: int, max_blocks: int) -> int:
    """Segments of the longest context block_tables can hold: the split grid's static
    third dimension (at least 1, so the grid is never empty)."""
    return max(1, triton_cdiv(block_size * max_blocks, ATTENTION_TILE["SEGMENT"]))


def attention_heads_per_program(group: int) -> int:
    """Query heads one split-shape program packs into its MMA tile: the largest divisor of
    the GQA group (query heads per KV head) that fits BLOCK_Q rows, so all of a program's
    heads read one KV head's keys."""
    if group < 1:
        raise ValueError(f"group: expected query heads per KV head >= 1, got {group}")
    return max(d for d in range(1, min(group, ATTENTION_TILE["BLOCK_Q"]) + 1) if group % d == 0)


def attention_split_launch_spec(num_tokens: int, num_requests: int, num_q_heads: int,
                                num_kv_heads: int, head_dim: int, block_size: int,
                                max_blocks: int, scale: float, *, quantize_out: bool = False
                                ) -> tuple[KernelCall, KernelCall]:
    """The split shape: the partial kernel over (T, Hq // heads, segments) (heads: query
    heads per program, `attention_heads_per_program`), then the combine over
    (T, Hq), which ends as the tile kernel does (quantize_out included). Roles as
    `attention_launch_spec`'s plus the fp32 workspace seg_stats (T, Hq, segments, 2) and
    seg_acc (T, Hq, segments, D) (`attention_workspace_shapes`)."""
    t, c = ATTENTION_SPLIT_TILE, ATTENTION_COMBINE_TILE
    workspace = (("stride_st", _stride("seg_stats", 0)), ("stride_sh", _stride("seg_stats", 1)),
                 ("stride_ss", _stride("seg_stats", 2)),
                 ("stride_at", _stride("seg_acc", 0)), ("stride_ah", _stride("seg_acc", 1)),
                 ("stride_as", _stride("seg_acc", 2)))
    group = num_q_heads // num_kv_heads
    heads = attention_heads_per_program(group)
    partial = KernelCall(
        t.kernel, (num_tokens, num_q_heads // heads, attention_segments(block_size, max_blocks)),
        (*_attention_inputs(num_requests, block_size, scale),
         ("seg_stats_ptr", _tensor("seg_stats")), ("seg_acc_ptr", _tensor("seg_acc")),
         *workspace),
        (("GROUP", group), ("HEADS", heads), ("HEAD_DIM", head_dim), *t.tile), t.options)
    combine = KernelCall(
        c.kernel, (num_tokens, num_q_heads),
        (("seg_stats_ptr", _tensor("seg_stats")), ("seg_acc_ptr", _tensor("seg_acc")),
         ("context_lens_ptr", _tensor("context_lens")),
         ("query_starts_ptr", _tensor("query_starts")),
         ("num_requests", _value(num_requests)), *workspace,
         ("q_ptr", _tensor("q")), *_attention_output(quantize_out)),
        (("HEAD_DIM", head_dim), *c.tile, *_attention_epilogue(quantize_out)), c.options)
    return partial, combine


def attention_workspace_shapes(num_tokens: int, num_q_heads: int, head_dim: int,
                               block_size: int, max_blocks: int) -> dict[str, tuple[int, ...]]:
    """The split shape's fp32 workspace by role: per (row, head, segment) the segment's
    (max, sum) and its unnormalised output."""
    segments = attention_segments(block_size, max_blocks)
    return {"seg_stats": (num_tokens, num_q_heads, segments, 2),
            "seg_acc": (num_tokens, num_q_heads, segments, head_dim)}


def qk_norm_rope_launch_spec(num_tokens: int, num_q_heads: int, num_kv_heads: int,
                             head_dim: int, num_slots: int, eps: float, *,
                             pdl: bool | int = False) -> KernelCall:
    """One program per (token, head) row, query heads first: roles q (T, Hq, D), k, v
    (T, Hkv, D), q_weight, k_weight (D,), cos, sin (T, D), k_cache, v_cache (blocks,
    block_size, Hkv, D; contiguous, so a slot's row is slot * stride(1)), slot_mapping
    (T,), q_out (T, Hq, D). The grid is the shapes': no device value, capturable."""
    t = QK_NORM_ROPE_TILE
    pdl_constexprs, pdl_options = pdl_launch(pdl)
    half_tile = 1 << max(head_dim // 2 - 1, 0).bit_length()  # next power of two >= D / 2
    return KernelCall(
        t.kernel, (num_tokens, num_q_heads + num_kv_heads),
        (("q_ptr", _tensor("q")), ("k_ptr", _tensor("k")), ("v_ptr", _tensor("v")),
         ("q_weight_ptr", _tensor("q_weight")), ("k_weight_ptr", _tensor("k_weight")),
         ("cos_ptr", _tensor("cos")), ("sin_ptr", _tensor("sin")),
         ("k_cache_ptr", _tensor("k_cache")), ("v_cache_ptr", _tensor("v_cache")),
         ("slot_mapping_ptr", _tensor("slot_mapping")), ("q_out_ptr", _tensor("q_out")),
         ("num_q_heads", _value(num_q_heads)), ("head_dim", _value(head_dim)),
         ("num_slots", _value(num_slots)),
         ("stride_qt", _stride("q", 0)), ("stride_qh", _stride("q", 1)),
         ("stride_kt", _stride("k", 0)), ("stride_kh", _stride("k", 1)),
         ("stride_vt", _stride("v", 0)), ("stride_vh", _stride("v", 1)),
         ("stride_cos", _stride("cos", 0)), ("stride_sin", _stride("sin", 0)),
         ("stride_kcs", _stride("k_cache", 1)), ("stride_kch", _stride("k_cache", 2)),
         ("stride_vcs", _stride("v_cache", 1)), ("stride_vch", _stride("v_cache", 2)),
         ("stride_ot", _stride("q_out", 0)), ("stride_oh", _stride("q_out", 1)),
         ("eps", _value(float(eps)))),
        (*t.tile, ("BLOCK_HALF", half_tile), *pdl_constexprs),
        (*t.options, ("enable_fp_fusion", False), *pdl_options))
