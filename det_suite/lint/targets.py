"""What each table is linted on: compute capabilities, and the role each plays for the table.

Each family is linted on every compute capability `platform.family.family_of_capability`
routes to it (sm89: sm_89; sm90: sm_90; sm100: sm_100, sm_103; sm120: sm_120, sm_121).
The "default" table serves any GPU without a family table (and any GPU under
DET_SUITE_ARCH=default), so it is linted on sm_80 (stands for pre-FP8 GPUs: Triton cannot
compile e4m3 there, reported as "unsupported") and on every FP8 target (sm_89, sm_90,
sm_100, sm_120). An explicit `arches` list replaces the targets of every table linted.
"Unsupported" (the target lacks the operand type) is a reported, passing status only on a
target the table is not shipped for; on its own family's targets it is a violation, as is
any other compile failure anywhere.
"""

from __future__ import annotations

import re
from typing import Iterable

# Compute capabilities each family's table is used on (platform.family.family_of_capability).
FAMILY_TARGETS: dict[str, tuple[int, ...]] = {
    "sm89": (89,),
    "sm90": (90,),
    "sm100": (100, 103),
    "sm120": (120, 121),
}
DEFAULT_TARGETS: tuple[int, ...] = (80, 89, 90, 100, 120)
# num_stages overrides linted besides each tile's own depth: `fp8_linear(num_stages=...)`
# overrides the table's depth for every M.
OVERRIDE_STAGES: tuple[int, ...] = (2, 3)

ROLE_PRIMARY = "primary"
ROLE_ALSO = "also served"
ROLE_FALLBACK = "fallback"
ROLE_CANDIDATE = "candidate"
# Roles where "the kernel does not compile here" is itself a violation: the target is a GPU
# the family's table is shipped for. Elsewhere it is reported as "unsupported".
OWN_ROLES = (ROLE_PRIMARY, ROLE_ALSO)


def parse_arch(text: str | int) -> int:
    """'sm_90', 'sm90', 'sm_90a', '90', '9.0' or 90 -> 90."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        raw = str(text).strip().lower()
        match = re.fullmatch(r"(?:sm_?)?(\d+)a?", raw)
        dotted = re.fullmatch(r"(\d+)\.(\d)", raw)
        if match:
            value = int(match.group(1))
        elif dotted:
            value = int(dotted.group(1)) * 10 + int(dotted.group(2))
        else:
            raise ValueError(f"arch {text!r} is not a CUDA target; expected e.g. sm_90, sm90 or 90")
    if value < 70:
        raise ValueError(f"arch {text!r}: tensor-core targets start at sm_70")
    return value


def arch_label(capability: int) -> str:
    return f"sm_{capability}"


def family_targets(family: str) -> tuple[tuple[int, str], ...]:
    """(capability, role) pairs a shipped family's table is linted on."""
    if family in FAMILY_TARGETS:
        caps = FAMILY_TARGETS[family]
        return tuple((cap, ROLE_PRIMARY if i == 0 else ROLE_ALSO) for i, cap in enumerate(caps))
    return tuple((cap, ROLE_FALLBACK) for cap in DEFAULT_TARGETS)


def explicit_targets(family: str, arches: Iterable[int]) -> tuple[tuple[int, str], ...]:
    """(capability, role) pairs for targets given by hand: a family's own keep their role,
    the others are candidates."""
    own = dict(family_targets(family)) if family in FAMILY_TARGETS else {}
    return tuple((cap, own.get(cap, ROLE_CANDIDATE)) for cap in arches)


def shipped_pairs(families: Iterable[str] | None = None, arches: Iterable | None = None):
    """(policy, targets) pairs for det-suite's shipped tables ("default" included)."""
    from det_suite.platform.family import validate_family
    from det_suite.policy import shipped_families, shipped_policy

    names = list(families) if families else list(shipped_families())
    caps = [parse_arch(a) for a in arches] if arches else None
    return [(shipped_policy(validate_family(name)),
             explicit_targets(name, caps) if caps else family_targets(name))
            for name in dict.fromkeys(names)]


def table_pair(path_or_policy, arches: Iterable | None = None):
    """(policy, targets) for a candidate table (a JSON path or a TilePolicy); targets
    default to those of the family the table names."""
    from det_suite.policy import TilePolicy, load_policy_file

    policy = path_or_policy if isinstance(path_or_policy, TilePolicy) \
        else load_policy_file(path_or_policy)
    caps = [parse_arch(a) for a in arches] if arches else None
    return (policy, explicit_targets(policy.family, caps) if caps
            else family_targets(policy.family))
