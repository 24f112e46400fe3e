"""GPU family detection. A family is the unit a tile table is written and proven for."""

from __future__ import annotations

import os

import torch

# Families with a shipped tile table. Anything else resolves to "default".
KNOWN_FAMILIES = ("sm89", "sm90", "sm100", "sm120")
DEFAULT_FAMILY = "default"
ARCH_OVERRIDE_ENV = "DET_SUITE_ARCH"
# Under TRITON_INTERPRET there is no MMA instruction at all; CPU runs walk the seed's
# (SM12x) table so the tile choices they exercise are the ones SM12x runners ship.
INTERPRETER_FAMILY = "sm120"


def family_of_capability(major: int, minor: int) -> str:
    """Map a CUDA compute capability to the tile-table family that serves it."""
    if (major, minor) == (8, 9):
        return "sm89"
    if (major, minor) == (9, 0):
        return "sm90"
    if major == 10:
        return "sm100"
    if major == 12:
        return "sm120"
    return DEFAULT_FAMILY


def validate_family(name: str, *, argument: str = "family") -> str:
    allowed = KNOWN_FAMILIES + (DEFAULT_FAMILY,)
    if name not in allowed:
        raise ValueError(f"{argument}={name!r} is not a GPU family det-suite knows; "
                         f"expected one of {', '.join(allowed)}")
    return name


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def device_family(device: torch.device | None = None) -> str:
    """The family whose tile table a launch on `device` uses.

    DET_SUITE_ARCH overrides detection (for diagnosis, e.g. running SM12x's table on an
    H200); the override is visible in every report through `family_source`.
    """
    override = os.environ.get(ARCH_OVERRIDE_ENV)
    if override:
        return validate_family(override, argument=ARCH_OVERRIDE_ENV)
    if device is not None and torch.device(device).type == "cpu" or interpreter_active():
        return INTERPRETER_FAMILY
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device and TRITON_INTERPRET is not set: det-suite's kernels "
                           "have nowhere to run (set TRITON_INTERPRET=1 to use the interpreter)")
    major, minor = torch.cuda.get_device_capability(device)
    return family_of_capability(major, minor)


def family_source() -> str:
    if os.environ.get(ARCH_OVERRIDE_ENV):
        return f"override ({ARCH_OVERRIDE_ENV})"
    if interpreter_active():
        return "interpreter"
    return "detected"
