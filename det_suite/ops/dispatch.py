"""Which FP8 route (Marlin, the engine's own GEMM, or det-suite's kernel) serves a static
per-tensor FP8 linear call.

Mirrors the seed's dispatch: forced Marlin and normal (non-deterministic) mode are left
exactly as upstream has them; deterministic mode on SM12x uses det-suite's kernel. For
every other family the choice is an explicit policy (argument, else the
DET_SUITE_FP8_OTHER_ARCH environment variable, else the documented default "upstream")
and the decision records where it came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

from det_suite.platform.family import validate_family

OTHER_ARCH_ENV = "DET_SUITE_FP8_OTHER_ARCH"


class Fp8Route(str, Enum):
    MARLIN = "marlin"          # forced weight-only FP8 Marlin path (unchanged upstream)
    UPSTREAM = "upstream"      # the engine's own FP8 GEMM (cuBLAS/CUTLASS/FlashInfer)
    DET_SUITE = "det_suite"    # det-suite's fixed-schedule Triton kernel


OTHER_ARCH_CHOICES = (Fp8Route.UPSTREAM.value, Fp8Route.DET_SUITE.value)
DEFAULT_OTHER_ARCH = Fp8Route.UPSTREAM.value
DETERMINISTIC_FAMILIES = ("sm120",)


@dataclass(frozen=True)
class Decision:
    route: Fp8Route
    reason: str


def _other_arch_policy(explicit: str | None) -> tuple[str, str]:
    if explicit is not None:
        value, source = explicit, "argument other_arch"
    elif os.environ.get(OTHER_ARCH_ENV):
        value, source = os.environ[OTHER_ARCH_ENV], f"environment {OTHER_ARCH_ENV}"
    else:
        value, source = DEFAULT_OTHER_ARCH, "default"
    if value not in OTHER_ARCH_CHOICES:
        raise ValueError(f"{source}={value!r} is not a valid other-arch policy; expected one of "
                         f"{', '.join(OTHER_ARCH_CHOICES)}")
    return value, source


def select_fp8_route(*, family: str, deterministic: bool, force_marlin: bool = False,
                        other_arch: str | None = None) -> Decision:
    """Pure decision: no device query, no import of the kernels."""
    validate_family(family)
    if force_marlin:
        return Decision(Fp8Route.MARLIN, "forced Marlin is left unchanged")
    if not deterministic:
        return Decision(Fp8Route.UPSTREAM, "normal mode is left unchanged")
    if family in DETERMINISTIC_FAMILIES:
        return Decision(Fp8Route.DET_SUITE,
                        f"deterministic mode on {family}: fixed-schedule Triton kernel")
    value, source = _other_arch_policy(other_arch)
    return Decision(Fp8Route(value), f"deterministic mode on {family}: {value} ({source})")
