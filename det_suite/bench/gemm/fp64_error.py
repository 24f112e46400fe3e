"""Accuracy against exact arithmetic: each GEMM's error against an fp64 product of the same
quantized operands, det-suite beside cuBLAS's default (`torch._scaled_mm`,
use_fast_accum=False), per cell.

The operands are the probe's own, not the timing operands: activations and weights with
positive means (|N(0, 1)| + 0.5 and N(0, 1) + 0.25), so every partial sum grows linearly with
K and an MMA that accumulates with fewer mantissa bits than fp32 between promotions shows
it. With zero-mean operands the partial sums stay as small as the result and every kernel
looked as accurate as its output rounding (measured on the H200). Both GEMMs round to the same output dtype, so the BF16 rounding floor is in both
errors; the ratio det / cuBLAS is what `--max-error-ratio` gates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

PROBE_ACTIVATION_OFFSET = 0.5
PROBE_WEIGHT_MEAN = 0.25


@dataclass(frozen=True)
class Fp64Error:
    det: float            # relative Frobenius error of det-suite's output
    reference: float      # the same for torch._scaled_mm (cuBLAS default accumulation)
    rounding: float       # the fp64 product rounded to the output dtype: the floor

    @property
    def ratio(self) -> float:
        return self.det / self.reference if self.reference else float("inf")

    def to_json(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}


def probe_operands(m: int, n: int, k: int, *, generator, device):
    """(a [M, K] fp8, w_kn [K, N] fp8 column-major view, a_scale, w_scale) for the probe."""
    import math

    import torch

    from det_suite.bench.gemm.operands import scale_tensor

    a = (torch.randn((m, k), generator=generator, device=device).abs()
         + PROBE_ACTIVATION_OFFSET).clamp(max=448.0).to(torch.float8_e4m3fn)
    w = (torch.randn((n, k), generator=generator, device=device) + PROBE_WEIGHT_MEAN) \
        .clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return a, w.t(), scale_tensor(1.0 / 16, device), scale_tensor(1.0 / math.sqrt(k), device)


def relative_error(out, exact) -> float:
    import torch

    diff = torch.linalg.vector_norm(out.double() - exact)
    return float(diff / torch.linalg.vector_norm(exact))


def measure_fp64_error(m: int, n: int, k: int, *, det: Callable, reference: Callable,
                       generator, device, out_dtype) -> Fp64Error:
    """`det` / `reference`: (a, w_kn, a_scale, w_scale) -> output in `out_dtype`."""
    a, w_kn, a_scale, w_scale = probe_operands(m, n, k, generator=generator, device=device)
    exact = (a.double() @ w_kn.double()) * (float(a_scale) * float(w_scale))
    return Fp64Error(det=relative_error(det(a, w_kn, a_scale, w_scale), exact),
                     reference=relative_error(reference(a, w_kn, a_scale, w_scale), exact),
                     rounding=relative_error(exact.to(out_dtype), exact))
