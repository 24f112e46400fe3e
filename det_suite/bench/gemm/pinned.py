"""`--config`: one launch config pinned for every cell, as text (JSON object or k=v pairs)
-> LaunchConfig fields -> a one-entry policy validated like a shipped table."""

from __future__ import annotations

import json
from dataclasses import MISSING, fields as dataclass_fields
from typing import Mapping

from det_suite.policy.tiles import TILE_PARAMS, TileParams

# Every tile parameter (TileParams, its defaults) and the entry's reduction may be pinned;
# warps, stages and the reduction get a default here, the block sizes none.
_CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3, "split_k": 1, "group_m": 8,
                    **{f.name: f.default for f in dataclass_fields(TileParams)
                       if f.default is not MISSING}}
_CONFIG_FLAGS = tuple(f.name for f in dataclass_fields(TileParams)
                      if isinstance(f.default, bool))
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
        "m_tiles": [{"max_m": None, **{name: bool(fields[name]) if name in _CONFIG_FLAGS
                                       else fields[name] for name in TILE_PARAMS}}]}}
    return parse_policy(raw, f"--config {json.dumps(fields, sort_keys=True)}")
