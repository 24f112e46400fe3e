"""`--config`: one launch config pinned for every cell, as text (JSON object or k=v pairs)
-> LaunchConfig fields -> a one-entry policy validated like a shipped table."""

from __future__ import annotations

import json
from typing import Mapping

_CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3, "split_k": 1, "group_m": 8,
                    "use_workspace": False, "use_tma": False, "fused_fixup": True,
                    "use_pdl": False, "swap_ab": False}
_CONFIG_FLAGS = ("use_workspace", "use_tma", "fused_fixup", "use_pdl", "swap_ab")
_CONFIG_REQUIRED = ("block_m", "block_n", "block_k")


def config_fields(raw: Mapping) -> dict:
    """LaunchConfig fields given by name -> all of them, defaults filled; unknown or missing
    fields are a ValueError naming `--config`."""
    allowed = set(_CONFIG_REQUIRED) | set(_CONFIG_DEFAULTS)
    unknown = set(raw) - allowed
    if unknown:
        raise ValueError(f"--config: unknown field(s) {', '.join(sorted(unknown))}; "
                         f"expected {', '.join(sorted(allowed))}")
    missing = [key for key in _CONFIG_REQUIRED if key not in raw]
    if missing:
        raise ValueError(f"--config: missing {', '.join(missing)}")
    return {**_CONFIG_DEFAULTS, **raw}


def parse_config_spec(spec: str) -> dict:
    """`--config` text (JSON object or k=v,k=v) -> LaunchConfig fields, defaults filled."""
    spec = spec.strip()
    if spec.startswith("{"):
        raw = json.loads(spec)
    else:
        raw = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            if "=" not in part:
                raise ValueError(f"--config: {part!r} is not key=value")
            key, value = (s.strip() for s in part.split("=", 1))
            raw[key] = value.lower() in ("1", "true", "yes") if key in _CONFIG_FLAGS \
                else int(value)
    return config_fields(raw)


def config_policy(fields: dict, family: str):
    """A one-entry policy that serves `fields` for every (N, K) and M (validated like a
    shipped table)."""
    from det_suite.policy import parse_policy

    raw = {"family": family, "expected_mma": "", "default": {
        "block_n": fields["block_n"], "block_k": fields["block_k"],
        "split_k": fields["split_k"], "group_m": fields["group_m"],
        "m_tiles": [{"max_m": None, "block_m": fields["block_m"],
                     "num_warps": fields["num_warps"], "num_stages": fields["num_stages"],
                     **{flag: bool(fields[flag]) for flag in _CONFIG_FLAGS}}]}}
    return parse_policy(raw, f"--config {json.dumps(fields, sort_keys=True)}")
