"""The accuracy sanity check in front of every timing: is an output the same GEMM as the
reference up to output rounding? (Not invariance, not bitwise: a wrong kernel must never
get a time.)"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# As tests/unit/ops/test_fp8_linear.py justifies from the H200 run: BF16 output rounding is 2**-8
# relative, and Hopper's FP8 wgmma accumulates with fewer mantissa bits than fp32 between
# promotions (Triton's default), which left isolated outputs ~1% of max|ref| off at
# K = 12288, while torch._scaled_mm promotes. A wrong tile, a stale buffer or garbage is off
# by O(1) and fails both bounds.
REL_FRO_TOL = 1e-2
MAX_ABS_TOL = 5e-2  # times max |reference|


@dataclass(frozen=True)
class Accuracy:
    ok: bool
    rel_fro_err: float
    max_abs_err: float
    ref_abs_max: float
    reason: str = ""


def check_accuracy(out: torch.Tensor, ref: torch.Tensor, *, rel_fro_tol: float = REL_FRO_TOL,
                   max_abs_tol: float = MAX_ABS_TOL) -> Accuracy:
    """Is `out` the same GEMM as `ref` up to output rounding? Not a bitwise check."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return Accuracy(False, math.inf, math.inf, math.nan,
                        f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    o, r = out.float(), ref.float()
    if not torch.isfinite(r).all():
        return Accuracy(False, math.nan, math.nan, math.nan, "reference has non-finite values")
    if not torch.isfinite(o).all():
        bad = int((~torch.isfinite(o)).sum())
        return Accuracy(False, math.nan, math.nan, float(r.abs().max()) if r.numel() else 0.0,
                        f"{bad} non-finite outputs")
    if o.numel() == 0:
        return Accuracy(True, 0.0, 0.0, 0.0)
    diff = o - r
    ref_abs_max = float(r.abs().max())
    max_abs_err = float(diff.abs().max())
    ref_norm = float(torch.linalg.vector_norm(r))
    diff_norm = float(torch.linalg.vector_norm(diff))
    rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    problems = []
    if rel > rel_fro_tol:
        problems.append(f"relative Frobenius error {rel:.3g} > {rel_fro_tol:g}")
    if max_abs_err > max_abs_tol * ref_abs_max:
        problems.append(f"max abs error {max_abs_err:.3g} > {max_abs_tol:g} x max|ref| "
                        f"{ref_abs_max:.3g}")
    return Accuracy(not problems, rel, max_abs_err, ref_abs_max, "; ".join(problems))
