"""Asking L2 for rows a program will read, before the program may read anything.

A GEMM launched with programmatic dependent launch starts while the kernel before it on the
stream still runs, and must not load until `griddepcontrol.wait` returns
(`grid_dependency.wait_for_previous_grid`). In a decode step that kernel is a norm or a
quantization: a few microseconds in which DRAM would sit idle. The GEMM's weight is not
among what it writes (weights are written once, when a model loads), so the GEMM can have
L2 fetch its weight rows first: `prefetch.global.L2` moves a 128-byte line from DRAM into L2
and nothing into the program. The loads after the wait read the same bytes, from L2, so the
arithmetic and its bits do not change; only when the weight traffic happens does.

Inline PTX, so GPU only: the ops pass PREFETCH_K = 0 under Triton's interpreter, where the
branch that calls this is pruned at trace time.
"""

import triton
import triton.language as tl

L2_LINE = tl.constexpr(128)  # bytes of one L2 line: FP8 elements it holds
# Lines per row one pass asks for: a (ROWS, PASS_LINES) grid of addresses, a handful per
# thread, however much of the row the tile prefetches.
PASS_LINES = tl.constexpr(8)


@triton.jit
def prefetch_rows_to_l2(base_ptr, stride_row, row0, rows_total, col0, col_end,
                        ROWS: tl.constexpr, COLS: tl.constexpr):
    """Ask L2 for rows row0 .. row0 + ROWS - 1 (of rows_total) of an FP8 matrix with unit
    column stride, columns col0 .. min(col0 + COLS, col_end) - 1, one fetch per line."""
    offs_row = tl.minimum(row0 + tl.arange(0, ROWS), rows_total - 1)
    row_ptrs = base_ptr + offs_row.to(tl.int64)[:, None] * stride_row
    stop = tl.minimum(col0 + COLS, col_end)
    for c0 in range(col0, stop, PASS_LINES * L2_LINE):
        # Lines past the range are clamped to its last one, not masked (inline PTX takes no
        # mask): fetching a line twice costs nothing, and no address leaves the range.
        offs_col = tl.minimum(c0 + tl.arange(0, PASS_LINES) * L2_LINE, stop - 1)
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];", "=r,l",
                                  [row_ptrs + offs_col[None, :]], dtype=tl.int32,
                                  is_pure=False, pack=1)
