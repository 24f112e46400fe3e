"""GPU families: which tile table serves a device. A family is the unit a tile table is
written and proven for; `resolve_family` is the one rule, read by `device_family` (live
device) and `hardware.Snapshot.tile_family` (a snapshot, never touching CUDA)."""

from __future__ import annotations

import os

import torch

from det_suite.platform.interpreter import interpreter_active

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


def resolve_family(*, on_cpu: bool, capability: tuple[int, int] | None) -> tuple[str, str]:
    """(family, source) for a launch: DET_SUITE_ARCH overrides detection (for diagnosis,
    e.g. running SM12x's table on an H200; the override is visible in every report), the
    interpreter or a CPU device (`on_cpu`, decided by the caller from a live process or a
    snapshot) walks INTERPRETER_FAMILY's table, else the capability."""
    override = os.environ.get(ARCH_OVERRIDE_ENV)
    if override:
        return (validate_family(override, argument=ARCH_OVERRIDE_ENV),
                f"override ({ARCH_OVERRIDE_ENV})")
    if on_cpu:
        return INTERPRETER_FAMILY, "interpreter"
    if capability is None:
        raise RuntimeError("no CUDA device and TRITON_INTERPRET is not set: det-suite's kernels "
                           "have nowhere to run (set TRITON_INTERPRET=1 to use the interpreter)")
    return family_of_capability(*capability), "detected"


def device_family(device: torch.device | None = None) -> str:
    """The family whose tile table a launch on `device` uses."""
    on_cpu = interpreter_active() or (device is not None and torch.device(device).type == "cpu")
    capability = None
    if not on_cpu and not interpreter_active() and not os.environ.get(ARCH_OVERRIDE_ENV) \
            and torch.cuda.is_available():
        capability = tuple(torch.cuda.get_device_capability(device))
    return resolve_family(on_cpu=on_cpu, capability=capability)[0]


def family_source() -> str:
    if os.environ.get(ARCH_OVERRIDE_ENV):
        return f"override ({ARCH_OVERRIDE_ENV})"
    if interpreter_active():
        return "interpreter"
    return "detected"
