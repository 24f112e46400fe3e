"""The tile-table format: JSON in, JSON out, and the tables det-suite ships.

`parse_policy` / `load_policy_file` read a table and reject anything malformed;
`policy_json` / `entry_json` / `m_tile_json` write one back in the same format (what
`det-suite tune` stores), `write_policy_file` only after the result parses again.
`m_tile_text` is an m_tile on one line, for logs and command output.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields, replace
from functools import lru_cache
from importlib import resources

from det_suite.platform.family import DEFAULT_FAMILY, KNOWN_FAMILIES, validate_family
from det_suite.policy.warp_specialized import warp_specialized_problems
from det_suite.policy.tiles import (L2_LINE_ELEMENTS, SUPPORTED_STAGES, SWAP_FALLBACK_BLOCK_M,
                                    LaunchConfig, MTile, TableEntry, TilePolicy, promotion_k)

# Families whose tables may use programmatic dependent launch / swapped operands (both need
# SM90+ instructions; swapping exists for wgmma's 64-row minimum).
PDL_FAMILIES = ("sm90", "sm100", "sm120")
SWAP_AB_FAMILIES = ("sm90",)


# ------------------------------------------------------------------ reading

def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


# An m_tile's keys are MTile's fields: what the dataclass declares, the format reads and writes.
M_TILE_KEYS: tuple[str, ...] = tuple(f.name for f in fields(MTile))


def _m_tile(raw: dict, where: str) -> MTile:
    unknown = sorted(set(raw) - set(M_TILE_KEYS)) if isinstance(raw, dict) else []
    if unknown:
        raise ValueError(f"{where}: unknown m_tile key(s) {', '.join(map(repr, unknown))}; "
                         f"expected {', '.join(M_TILE_KEYS)}")
    return MTile(**raw)


def parse_entry(raw: dict, where: str, n: int | None, k: int | None) -> TableEntry:
    """One entry of a table (`where` names it in errors), validated: the tuner builds its
    entries through this too, so nothing it stores could fail to load."""
    try:
        m_tiles = tuple(_m_tile(t, where) for t in raw["m_tiles"])
        entry = TableEntry(n=n, k=k, block_n=raw["block_n"], block_k=raw["block_k"],
                           split_k=raw.get("split_k", 1), group_m=raw.get("group_m", 8),
                           m_tiles=m_tiles)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{where}: malformed tile entry ({exc!r})") from exc
    problems = []
    for name in ("block_n", "block_k"):
        if not _power_of_two(getattr(entry, name)):
            problems.append(f"{name} must be a power of two")
    if entry.block_k < 32:
        problems.append("block_k must be >= 32 (one FP8 MMA step)")
    if not entry.m_tiles or entry.m_tiles[-1].max_m is not None:
        problems.append("m_tiles must end with an unbounded tile (max_m null)")
    bounds = [t.max_m for t in entry.m_tiles[:-1]]
    if any(b is None for b in bounds) or bounds != sorted(bounds):
        problems.append("m_tiles max_m must be increasing")
    if entry.split_k < 1:
        problems.append("split_k must be >= 1")
    if k is not None and entry.split_k > -(-k // entry.block_k):
        problems.append("split_k exceeds the number of K tiles (empty chunks)")
    for t in entry.m_tiles:
        if t.block_n is not None and not _power_of_two(t.block_n):
            problems.append(f"m_tile block_n {t.block_n} must be a power of two")
        if not _power_of_two(t.block_m) or t.block_m < 16:
            problems.append(f"block_m {t.block_m} must be a power of two >= 16")
        if t.num_stages not in SUPPORTED_STAGES:
            problems.append(f"num_stages {t.num_stages} not in {SUPPORTED_STAGES}")
        if t.block_k is not None:
            base = LaunchConfig(block_m=t.block_m, block_n=entry.block_n, block_k=entry.block_k,
                                num_warps=t.num_warps, num_stages=t.num_stages,
                                split_k=entry.split_k, group_m=entry.group_m,
                                use_workspace=False)
            if not _power_of_two(t.block_k) or t.block_k < 32:
                problems.append(f"m_tile block_k {t.block_k} must be a power of two >= 32")
            elif k is None or k % t.block_k or k % entry.block_k \
                    or base.k_partition(k) != replace(base, block_k=t.block_k) \
                    .k_partition(k):
                problems.append(f"m_tile block_k {t.block_k} needs an (N, K) entry whose K "
                                f"is a multiple of both BLOCK_Ks and splits into the same "
                                f"{entry.split_k} chunk(s)")
        if t.swap_ab and not t.use_tma:
            problems.append("swap_ab tiles must set use_tma (the swapped kernel loads by TMA)")
        if t.swap_ab and (t.block_n or entry.block_n) < SWAP_FALLBACK_BLOCK_M:
            problems.append(f"swap_ab tiles need block_n >= {SWAP_FALLBACK_BLOCK_M} (the "
                            "weight rows fill the MMA's row side)")
        if not _power_of_two(t.num_warps):
            problems.append(f"num_warps {t.num_warps} must be a power of two")
        problems.extend(_prefetch_problems(t))
    if problems:
        raise ValueError(f"{where}: " + "; ".join(problems))
    return entry


def _prefetch_problems(tile: MTile) -> list[str]:
    # An L2 fetch issued before the wait only pays while the previous grid still runs, which
    # only a PDL launch allows; the kernel finds its weight rows through the TMA launch's
    # pointer. Whole 128-byte lines of FP8 (128 elements) keep one fetch per line.
    if not isinstance(tile.prefetch_k, int) or isinstance(tile.prefetch_k, bool) \
            or tile.prefetch_k < 0 or tile.prefetch_k % L2_LINE_ELEMENTS:
        return [f"prefetch_k must be 0 or a positive multiple of {L2_LINE_ELEMENTS} "
                f"(K elements of whole 128-byte lines); got {tile.prefetch_k!r}"]
    if tile.prefetch_k and not (tile.use_pdl and tile.use_tma):
        return [f"prefetch_k {tile.prefetch_k} needs use_pdl and use_tma (a fetch before the "
                "wait overlaps the previous grid only under programmatic dependent launch)"]
    return []


def parse_policy(raw: dict, source: str) -> TilePolicy:
    family = validate_family(raw.get("family", ""), argument=f"{source}: family")
    default = parse_entry(raw["default"], f"{source}: default", None, None)
    entries = {}
    for item in raw.get("entries", []):
        n, k = item["n"], item["k"]
        entries[(n, k)] = parse_entry(item, f"{source}: entry {n}x{k}", n, k)
    promote_k = promotion_k(family)
    default = replace(default, promote_k=promote_k)
    entries = {key: replace(entry, promote_k=promote_k) for key, entry in entries.items()}
    for entry in (default, *entries.values()):
        if promote_k is not None:
            short = sorted({b for b in (entry.block_k, *(t.block_k for t in entry.m_tiles))
                            if b is not None and b % promote_k})
            if short:
                raise ValueError(f"{source}: entry {entry.key}: block_k {short} is not a "
                                 f"multiple of {family}'s FP32 promotion interval "
                                 f"({promote_k}): the MMA would promote at a different K")
        for tile in entry.m_tiles:
            if tile.use_pdl and family not in PDL_FAMILIES:
                raise ValueError(f"{source}: entry {entry.key}: use_pdl needs SM90+ "
                                 f"(families {', '.join(PDL_FAMILIES)}); family is {family}")
            if tile.block_k is not None and family not in SWAP_AB_FAMILIES:
                raise ValueError(f"{source}: entry {entry.key}: m_tile block_k overrides are "
                                 f"for families {', '.join(SWAP_AB_FAMILIES)}, where the "
                                 f"invariance suite has proven them; family is {family}")
            problems = warp_specialized_problems(tile, entry, family, promote_k)
            if problems:
                raise ValueError(f"{source}: entry {entry.key}: " + "; ".join(problems))
            if tile.swap_ab and family not in SWAP_AB_FAMILIES:
                raise ValueError(f"{source}: entry {entry.key}: swap_ab is for families "
                                 f"{', '.join(SWAP_AB_FAMILIES)}; family is {family}")
    return TilePolicy(family=family, expected_mma=raw.get("expected_mma", ""),
                      default=default, entries=entries, source=source)


def load_policy_file(path) -> TilePolicy:
    with open(path) as handle:
        return parse_policy(json.load(handle), str(path))


@lru_cache(maxsize=None)
def shipped_policy(family: str) -> TilePolicy:
    """The tile table det-suite ships for `family` (package data)."""
    validate_family(family)
    resource = resources.files("det_suite.policy").joinpath("tables", f"{family}.json")
    return parse_policy(json.loads(resource.read_text()), f"det_suite/policy/tables/{family}.json")


def shipped_families() -> tuple[str, ...]:
    return KNOWN_FAMILIES + (DEFAULT_FAMILY,)


# ------------------------------------------------------------------ writing

def m_tile_json(tile: MTile) -> dict:
    """An m_tile as the parser reads it: max_m, then every field that is required or away
    from its default (the parser fills the defaults back in)."""
    raw = {"max_m": tile.max_m}
    for spec in fields(MTile):
        value = getattr(tile, spec.name)
        if spec.name != "max_m" and (spec.default is MISSING or value != spec.default):
            raw[spec.name] = value
    return raw


def entry_json(entry: TableEntry) -> dict:
    raw = {} if entry.n is None else {"n": entry.n, "k": entry.k}
    raw.update({"block_n": entry.block_n, "block_k": entry.block_k, "split_k": entry.split_k,
                "group_m": entry.group_m, "m_tiles": [m_tile_json(t) for t in entry.m_tiles]})
    return raw


def policy_json(policy: TilePolicy, **fields) -> dict:
    """A table as `parse_policy` reads it: family, expected_mma, then any further `fields`
    (a note, provenance) in the order given, then the default and the entries by (N, K)."""
    return {"family": policy.family, "expected_mma": policy.expected_mma, **fields,
            "default": entry_json(policy.default),
            "entries": [entry_json(policy.entries[key]) for key in sorted(policy.entries)]}


def write_policy_file(path, payload: dict):
    """Check the payload loads as a table, then write it atomically (a table that would not
    load is never written). Returns the path."""
    from det_suite.reports.files import write_json_atomic

    parse_payload(payload, str(path))
    return write_json_atomic(path, payload)


def parse_payload(payload: dict, source: str) -> TilePolicy:
    """A table payload (`policy_json`'s output) read back as its JSON file would be: what
    checks a table before it is written or used."""
    return parse_policy(json.loads(json.dumps(payload, default=str)), source)


def m_tile_text(tile: MTile) -> str:
    bound = tile.max_m if tile.max_m is not None else "inf"
    return (f"<={bound} bm{tile.block_m} w{tile.num_warps} s{tile.num_stages}"
            + (f" bn{tile.block_n}" if tile.block_n is not None else "")
            + (f" bk{tile.block_k}" if tile.block_k is not None else "")
            + (" ws" if tile.use_workspace else "")
            + (" unfused" if tile.use_workspace and not tile.fused_fixup else "")
            + (" tma" if tile.use_tma else "")
            + (" swap" if tile.swap_ab else "")
            + (" pdl" if tile.use_pdl else "")
            + (f" pf{tile.prefetch_k}" if tile.prefetch_k else "")
            + (" pingpong" if tile.warp_specialized else ""))
