"""What the GEMM benchmark runs over: (N, K) shapes (presets from the shape catalog, or
explicit `N,K`) and row counts M."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from det_suite.models.catalog import MODELS, projections

DEFAULT_MS = (1, 8, 32, 128, 512, 2048, 8192)


@dataclass(frozen=True)
class GemmShape:
    name: str
    n: int
    k: int

    @property
    def dims(self) -> str:
        return f"{self.n}x{self.k}"


def _preset(model: str) -> tuple[GemmShape, ...]:
    """A model's projections from the shape catalog, named '<model>/<projection>'."""
    return tuple(GemmShape(f"{p.model}/{p.name}", p.n, p.k) for p in projections(model))


SHAPE_PRESETS: dict[str, tuple[GemmShape, ...]] = {model: _preset(model) for model in MODELS}
# The N,K example in the error message is a real projection (llama-3.1-8b's down), taken from
# the catalog rather than restated here.
_EXAMPLE = (SHAPE_PRESETS.get("llama-3.1-8b") or next(iter(SHAPE_PRESETS.values())))[-1]
_EXPLICIT = re.compile(r"^(?:(?P<name>[A-Za-z0-9_./-]+)=)?(?P<n>\d+)\s*[,xX]\s*(?P<k>\d+)$")


def parse_shape(spec: str) -> tuple[GemmShape, ...]:
    """A preset name, `N,K`, `NxK` or `NAME=N,K` -> the shapes it names."""
    spec = spec.strip()
    if spec in SHAPE_PRESETS:
        return SHAPE_PRESETS[spec]
    match = _EXPLICIT.match(spec)
    if not match:
        raise ValueError(f"shape {spec!r} is neither a preset ({', '.join(SHAPE_PRESETS)}) "
                         f"nor N,K (e.g. {_EXAMPLE.n},{_EXAMPLE.k})")
    n, k = int(match["n"]), int(match["k"])
    if n < 1 or k < 1:
        raise ValueError(f"shape {spec!r}: N and K must be >= 1")
    if n % 16 or k % 16:
        # torch._scaled_mm (cuBLASLt FP8) needs N and K divisible by 16.
        raise ValueError(f"shape {spec!r}: N and K must be multiples of 16 for the FP8 "
                         "vendor GEMMs")
    return (GemmShape(match["name"] or f"{n}x{k}", n, k),)


def parse_shapes(specs: Iterable[str]) -> list[GemmShape]:
    """Expand presets and explicit shapes; the first occurrence of an (N, K) wins."""
    shapes, seen = [], set()
    for spec in specs:
        for shape in parse_shape(spec):
            if (shape.n, shape.k) not in seen:
                seen.add((shape.n, shape.k))
                shapes.append(shape)
    if not shapes:
        raise ValueError("no shapes given")
    return shapes


def parse_ms(values: Iterable[int]) -> list[int]:
    ms = sorted(set(int(v) for v in values))
    if not ms or ms[0] < 1:
        raise ValueError(f"M values must be >= 1; got {list(values)}")
    return ms
