"""The benchmark's quantized operands: random FP8 with no zeros (nothing is shortcut and a
wrong result cannot hide) and static per-tensor scales. The tuner and the invariance
stress inputs draw theirs from here too."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported inside functions: the CLI imports this package to
    import torch  # register its options, and `det-suite --help` must stay fast


def random_fp8(shape: tuple[int, ...], *, generator: torch.Generator,
               device: torch.device | str, std: float = 1.0) -> torch.Tensor:
    """Normal random values cast to float8_e4m3fn, none of them zero: magnitudes below the
    smallest normal (2**-6) are pushed up to it, keeping their sign."""
    import torch

    x = torch.randn(shape, generator=generator, device=device, dtype=torch.float32) * std
    tiny = 2.0 ** -6
    x = torch.where(x.abs() < tiny, torch.full_like(x, tiny).copysign(x), x)
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def scale_tensor(value: float, device) -> torch.Tensor:
    import torch

    return torch.tensor([value], dtype=torch.float32, device=device)
