"""How the batch-invariant ops (`ops.batch_invariant`) launch their kernels, as data.

Each op has ONE tile, the same for every number of rows or queries: the tile is what fixes
the reduction order and, for the two kernels that feed tensor cores, the MMA instruction.
On SM90 a BLOCK_M (BLOCK_Q) of 64 with 4 warps is a wgmma tile and 16/32 an mma.sync one
(docs: design.md), so a tile chosen by M would mix two instructions; nothing here looks at
M except the grid. Everything else may depend on the shape's fixed dimensions only.

Like `ops.launch_spec`, a description here is what both the launcher and the instruction
lint (`lint.op_kernels`) bind, so the lint compiles exactly what runs.
"""

from __future__ import annotations

from dataclasses import dataclass

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
LOG_SOFTMAX_TILE = OpTile("bi_log_softmax_kernel", (("BLOCK_V", 4096),), 8, 1)
ATTENTION_TILE = OpTile("bi_paged_attention_kernel", (("BLOCK_Q", 64), ("BLOCK_KV", 64)), 4, 2)
OP_TILES = (MATMUL_TILE, RMSNORM_TILE, LOG_SOFTMAX_TILE, ATTENTION_TILE)


def _tensor(role):
    return LaunchArg("tensor", role=role)


def _stride(role, dim):
    return LaunchArg("stride", role=role, dim=dim)


def _value(value):
    return LaunchArg("int", value=value)  # "int": a literal runtime value (eps/scale: float)


def matmul_launch_spec(m: int, n: int, k: int, *, has_bias: bool) -> KernelCall:
    """out (m, n) = x (m, k) @ w (n, k).T (+ bias): roles x, w, bias, out."""
    t = MATMUL_TILE
    return KernelCall(
        t.kernel, (triton_cdiv(m, t["BLOCK_M"]), triton_cdiv(n, t["BLOCK_N"])),
        (("x_ptr", _tensor("x")), ("w_ptr", _tensor("w")),
         ("bias_ptr", _tensor("bias" if has_bias else "w")),  # never read without bias
         ("out_ptr", _tensor("out")), ("M", _value(m)), ("N", _value(n)), ("K", _value(k)),
         ("stride_xm", _stride("x", 0)), ("stride_xk", _stride("x", 1)),
         ("stride_wn", _stride("w", 0)), ("stride_wk", _stride("w", 1)),
         ("stride_om", _stride("out", 0)), ("stride_on", _stride("out", 1))),
        (("HAS_BIAS", has_bias), *t.tile), t.options)


def rmsnorm_launch_spec(m: int, h: int, eps: float) -> KernelCall:
    """One program per row of x (m, h): roles x, weight, out."""
    t = RMSNORM_TILE
    return KernelCall(
        t.kernel, (m,),
        (("x_ptr", _tensor("x")), ("weight_ptr", _tensor("weight")), ("out_ptr", _tensor("out")),
         ("H", _value(h)), ("stride_xm", _stride("x", 0)), ("stride_om", _stride("out", 0)),
         ("eps", _value(float(eps)))),
        t.tile, t.options)


def log_softmax_launch_spec(m: int, v: int) -> KernelCall:
    """One program per row of x (m, v): roles x, out."""
    t = LOG_SOFTMAX_TILE
    return KernelCall(
        t.kernel, (m,),
        (("x_ptr", _tensor("x")), ("out_ptr", _tensor("out")), ("V", _value(v)),
         ("stride_xm", _stride("x", 0)), ("stride_om", _stride("out", 0))),
        t.tile, t.options)


def attention_launch_spec(num_tokens: int, num_requests: int, num_q_heads: int,
                          num_kv_heads: int, head_dim: int, block_size: int,
                          scale: float) -> KernelCall:
    """Roles q (T, Hq, D), k_cache / v_cache (blocks, block_size, Hkv, D), out,
    block_tables (R, max_blocks), context_lens (R,), query_starts (R + 1,)."""
    t = ATTENTION_TILE
    grid = (num_tokens // t["BLOCK_Q"] + num_requests, num_q_heads)
    return KernelCall(
        t.kernel, grid,
        (("q_ptr", _tensor("q")), ("k_cache_ptr", _tensor("k_cache")),
         ("v_cache_ptr", _tensor("v_cache")), ("out_ptr", _tensor("out")),
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
         ("stride_ot", _stride("out", 0)), ("stride_oh", _stride("out", 1)),
         ("stride_bt", _stride("block_tables", 0))),
        (("GROUP", num_q_heads // num_kv_heads), ("HEAD_DIM", head_dim), *t.tile), t.options)
