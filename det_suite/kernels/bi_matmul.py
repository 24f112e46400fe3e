"""Batch-invariant BF16/FP16 matrix multiply for the lm_head: out = x @ w.T (+ bias).

The reduction over K is one fixed schedule: BLOCK_K tiles visited in ascending order, each
`tl.dot` accumulating into one fp32 accumulator, no split-K. The launch (ops) uses one
tile for every M, so every row of every call is summed by the same MMA instruction in
the same order; M only changes how many row tiles the grid holds. Rows never mix: an
MMA's arithmetic for one output row does not read the other rows.

With USE_PDL (programmatic dependent launch, SM90+) every program waits for the previous
grid before it touches memory (`grid_dependency.wait_for_previous_grid`), so the launch
may start while that grid drains; the arithmetic is the same either way.
"""

import triton
import triton.language as tl

from det_suite.kernels.grid_dependency import wait_for_previous_grid


@triton.jit
def bi_matmul_kernel(
    x_ptr, w_ptr, bias_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_xk,
    stride_wn, stride_wk,
    stride_om, stride_on,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_grid(USE_PDL)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    row_exists = offs_m < M
    col_exists = offs_n < N
    # Row offsets in int64: the lm_head's output (M x 151936) outgrows int32 offsets at
    # M >= 14k rows.
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # The K tail is zero-filled on both operands: a product past K would be summed in.
        k_exists = (k0 + offs_k) < K
        x = tl.load(x_ptrs, mask=row_exists[:, None] & k_exists[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=k_exists[:, None] & col_exists[None, :], other=0.0)
        acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    if HAS_BIAS:
        # Bias after the whole K sum, in fp32, then one rounding to the output dtype.
        acc += tl.load(bias_ptr + offs_n, mask=col_exists, other=0.0).to(tl.float32)[None, :]
    out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty),
             mask=row_exists[:, None] & col_exists[None, :])
