"""One synthetic FP8 linear layer and its activations, with sane static scales (whole
synthetic checkpoints, built the same way, are `models.synthetic`, issue 12).

Weights are scaled like a trained model's (std about 1/sqrt(K)) and the input scale is
calibrated from the activation amax (amax / 448), the way ModelOpt calibrates: otherwise
activations saturate at +-448 and every row looks alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from det_suite.kernels.fp8_constants import FP8_E4M3_MAX


@dataclass(frozen=True)
class Fp8Linear:
    weight: torch.Tensor        # float8_e4m3fn [N, K]
    weight_scale: torch.Tensor  # float32 scalar
    input_scale: torch.Tensor   # float32 scalar
    bias: torch.Tensor | None   # (N,) in the activation dtype

    @property
    def n(self) -> int:
        return self.weight.shape[0]

    @property
    def k(self) -> int:
        return self.weight.shape[1]

    def args(self) -> tuple:
        """(weight, weight_scale, input_scale, bias): fp8_linear's arguments after x."""
        return (self.weight, self.weight_scale, self.input_scale, self.bias)


def make_fp8_linear(n: int, k: int, *, seed: int = 0, bias_dtype: torch.dtype | None = None,
                    device: str | torch.device = "cpu",
                    calibration: torch.Tensor | None = None) -> Fp8Linear:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) / k ** 0.5
    weight_scale = w.abs().amax() / FP8_E4M3_MAX
    weight = (w / weight_scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    amax = calibration.abs().amax().float() if calibration is not None else torch.tensor(4.0)
    input_scale = (amax / FP8_E4M3_MAX).clamp_min(1e-12)
    bias = None
    if bias_dtype is not None:
        bias = (torch.randn(n, generator=gen) * 0.1).to(bias_dtype)
    return Fp8Linear(
        weight=weight.to(device),
        weight_scale=weight_scale.reshape(()).float().to(device),
        input_scale=input_scale.reshape(()).float().to(device),
        bias=bias.to(device) if bias is not None else None,
    )


def make_activations(m: int, k: int, *, dtype: torch.dtype = torch.bfloat16, seed: int = 0,
                     device: str | torch.device = "cpu") -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + 1_000_003)
    return torch.randn(m, k, generator=gen).to(dtype).to(device)
