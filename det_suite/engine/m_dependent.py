"""The model-level positive control: det's op set, except that every FP8 linear picks its
reduction schedule from M, the number of rows in the call.

This is what a vendor GEMM's heuristic does to a cache hit (a different split-K count for a
different M), made certain to change bits: K is cut into `k_chunks(M)` chunks, each chunk's
partial product is rounded to the activation dtype, and the rounded partials are summed in
fp32. Cold prefill (M = the whole prompt) and a hit (M = the uncached suffix) then round
their sums differently on any machine, CPU or GPU, unlike stock kernels, which may happen to
be invariant on a given runner (cuBLASLt was on the H100 in issue 39). `cache-hit` must
flag this arm; a check that cannot is not shown to detect anything on that runner.
"""

from __future__ import annotations

import dataclasses

import torch

from det_suite.engine.opsets import fp8_operand, vendor_scaled_mm

MODE = "m-dependent"
# torch._scaled_mm wants K (and a slice's start, for 16-byte alignment) in multiples of 16.
K_ALIGN = 16
# The chunk counts the schedule cycles through. Three, so that two calls whose M differ by a
# factor of 2 to 8 (bit lengths 1 or 2 apart) always use different counts: the hit's M is
# the suffix, the cold call's M adds the cached prefix, and no count is shared between them
# unless their bit lengths are a multiple of 3 apart.
CYCLE = 3


def k_chunks(m: int, k: int) -> int:
    """How many K chunks a call of m rows sums: 1 + (bit length of m) mod 3, capped so that
    every chunk holds at least K_ALIGN elements. A function of M: forbidden by the
    invariance rule, which is the point."""
    wanted = 1 + m.bit_length() % CYCLE
    return max(1, min(wanted, k // K_ALIGN))


def chunk_bounds(k: int, chunks: int) -> list[tuple[int, int]]:
    """[start, end) of each of `chunks` chunks: equal steps of k / chunks rounded down to a
    multiple of K_ALIGN (so every start is aligned), the last chunk taking the tail."""
    step = max(K_ALIGN, k // chunks // K_ALIGN * K_ALIGN)
    starts = [i * step for i in range(chunks) if i * step < k]
    return [(s, starts[i + 1] if i + 1 < len(starts) else k) for i, s in enumerate(starts)]


def m_dependent_fp8_linear(x, lin) -> torch.Tensor:
    """The linear with a schedule chosen by M (see the module docstring)."""
    q, dtype = fp8_operand(x, lin.input_scale)
    lead, k = q.shape[:-1], q.shape[-1]
    q2 = q.reshape(-1, k)
    total = None
    for start, end in chunk_bounds(k, k_chunks(q2.shape[0], k)):
        # Each chunk's product rounded to the activation dtype, then summed in fp32.
        part = vendor_scaled_mm(q2[:, start:end], lin.weight[:, start:end], lin.input_scale,
                                lin.weight_scale, None, dtype).float()
        total = part if total is None else total + part
    if lin.bias is not None:
        total = total + lin.bias.float()
    return total.to(dtype).reshape(*lead, total.shape[-1])


def m_dependent_opset():
    """det's op set (its norms, attention, fused producers, lm_head) with the FP8 linears
    replaced; projections are not stacked, so every linear goes through the control."""
    from det_suite.engine.opsets import det_opset

    return dataclasses.replace(det_opset(), name=MODE, fp8_linear=m_dependent_fp8_linear,
                               stack_projections=None, norm_for_group=None,
                               group_linear=None)
