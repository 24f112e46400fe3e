"""Tile policy: per-GPU-family tables stored as data, chosen by (family, N, K).

A table entry fixes everything that shapes the reduction (BLOCK_K, SPLIT_K, BLOCK_N, the
MMA family the tiles compile to). M chooses only among the entry's `m_tiles`, each of
which must compile to the same MMA instruction along K (checked by `det-suite lint-policy`)
and may also pick free launch parameters (warps, stages, workspace vs single pass).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources

from det_suite.platform.family import DEFAULT_FAMILY, KNOWN_FAMILIES, validate_family

SUPPORTED_STAGES = (2, 3, 4, 5, 6, 7, 8)
# wgmma's row count: what a swapped (swap_ab) tile runs with when TMA is ruled out.
SWAP_FALLBACK_BLOCK_M = 64
# Families whose tables may use programmatic dependent launch / swapped operands (both need
# SM90+ instructions; swapping exists for wgmma's 64-row minimum).
PDL_FAMILIES = ("sm90", "sm100", "sm120")
SWAP_AB_FAMILIES = ("sm90",)


@dataclass(frozen=True)
class LaunchConfig:
    """Everything one launch of the FP8 GEMM needs besides its tensors."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    split_k: int
    group_m: int
    use_workspace: bool
    use_tma: bool = False  # loads only: TMA descriptors instead of pointer loads
    fused_fixup: bool = True  # workspace path: last split program sums, no second launch
    # Programmatic dependent launch (SM90+): the GEMM may be launched while the previous
    # kernel on the stream drains, and waits (griddepcontrol.wait) before touching memory.
    # Moves the launch, never the arithmetic.
    use_pdl: bool = False
    # TMA tiles only (SM90): the weight on wgmma's 64-row side, block_m tokens on its narrow
    # side (fp8_scaled_mm_swap_ab.py). Where the operands rule TMA out, the pointer kernel
    # runs the tile unswapped with SWAP_FALLBACK_BLOCK_M rows instead.
    swap_ab: bool = False

    def k_chunk(self, k: int) -> int:
        """Elements of K per split chunk: whole BLOCK_K tiles, so no tile straddles chunks."""
        tiles = -(-k // self.block_k)
        return -(-tiles // self.split_k) * self.block_k

    def reduction_schedule(self, k: int) -> tuple[int, int, int]:
        """What fixes the arithmetic for a K (with the MMA family): the chunk length, the
        number of chunks, and the K the MMA steps run to (K padded to whole BLOCK_K tiles;
        a padded step adds zero products, which the accumulator may still round)."""
        return (self.k_chunk(k), self.split_k, -(-k // self.block_k) * self.block_k)


@dataclass(frozen=True)
class MTile:
    """One row-count class: rows up to `max_m` (None = unbounded) use these parameters."""

    max_m: int | None
    block_m: int
    num_warps: int
    num_stages: int
    use_workspace: bool = False
    use_tma: bool = False
    fused_fixup: bool = True
    use_pdl: bool = False
    swap_ab: bool = False
    # Overrides the entry's BLOCK_K for this row class (SM90 named entries only): the MMA
    # still steps through K in k32 steps in the same order, so only the number of steps per
    # loop iteration changes. Allowed where K is a multiple of both BLOCK_Ks and the chunks
    # stay the same, so the steps, chunks and padding are identical (checked at load).
    block_k: int | None = None
    # Overrides the entry's BLOCK_N for this row class. Only for families whose tiles of every
    # BLOCK_N share one MMA K step and input type (SM90 wgmma n64/n128/n256: design.md's
    # second probe found them bit-identical); the lint and the invariance suite re-prove it.
    block_n: int | None = None


@dataclass(frozen=True)
class TableEntry:
    n: int | None  # None for the family default
    k: int | None
    block_n: int
    block_k: int
    split_k: int
    group_m: int
    m_tiles: tuple[MTile, ...]

    def select(self, m: int) -> LaunchConfig:
        for tile in self.m_tiles:
            if tile.max_m is None or m <= tile.max_m:
                return LaunchConfig(
                    block_m=tile.block_m, block_n=tile.block_n or self.block_n,
                    block_k=tile.block_k or self.block_k,
                    num_warps=tile.num_warps, num_stages=tile.num_stages,
                    split_k=self.split_k, group_m=self.group_m,
                    use_workspace=tile.use_workspace and self.split_k > 1,
                    use_tma=tile.use_tma, fused_fixup=tile.fused_fixup,
                    use_pdl=tile.use_pdl, swap_ab=tile.swap_ab,
                )
        raise AssertionError("validated tables end with an unbounded m_tile")

    def variants(self) -> tuple[LaunchConfig, ...]:
        """Every launch config M can select for this entry (what must agree on the MMA)."""
        return tuple(self.select(t.max_m if t.max_m is not None else 1 << 30)
                     for t in self.m_tiles)

    @property
    def key(self) -> str:
        return "default" if self.n is None else f"{self.n}x{self.k}"


@dataclass(frozen=True)
class TilePolicy:
    family: str
    expected_mma: str  # what the family's tiles should compile to, for reports and the lint
    default: TableEntry
    entries: dict[tuple[int, int], TableEntry] = field(default_factory=dict)
    source: str = ""

    def entry(self, n: int, k: int) -> TableEntry:
        return self.entries.get((n, k), self.default)

    def select(self, m: int, n: int, k: int, *, num_stages: int | None = None) -> LaunchConfig:
        """Launch config for an (m x k) @ (k x n) call. `num_stages` overrides the table's
        pipeline depth (it moves loads, not arithmetic)."""
        config = self.entry(n, k).select(m)
        if num_stages is not None:
            config = replace(config, num_stages=validate_stages(num_stages))
        return config

    def all_entries(self) -> tuple[TableEntry, ...]:
        return (self.default, *self.entries.values())


def validate_stages(num_stages: int) -> int:
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) \
            or num_stages not in SUPPORTED_STAGES:
        raise ValueError(f"num_stages={num_stages!r} is not supported; expected one of "
                         f"{SUPPORTED_STAGES}")
    return num_stages


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _parse_entry(raw: dict, where: str, n: int | None, k: int | None) -> TableEntry:
    try:
        m_tiles = tuple(MTile(max_m=t["max_m"], block_m=t["block_m"], num_warps=t["num_warps"],
                              num_stages=t["num_stages"],
                              use_workspace=t.get("use_workspace", False),
                              use_tma=t.get("use_tma", False),
                              fused_fixup=t.get("fused_fixup", True),
                              use_pdl=t.get("use_pdl", False),
                              swap_ab=t.get("swap_ab", False),
                              block_n=t.get("block_n"), block_k=t.get("block_k"))
                        for t in raw["m_tiles"])
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
                    or base.reduction_schedule(k) != replace(base, block_k=t.block_k) \
                    .reduction_schedule(k):
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
    if problems:
        raise ValueError(f"{where}: " + "; ".join(problems))
    return entry


def parse_policy(raw: dict, source: str) -> TilePolicy:
    family = validate_family(raw.get("family", ""), argument=f"{source}: family")
    default = _parse_entry(raw["default"], f"{source}: default", None, None)
    entries = {}
    for item in raw.get("entries", []):
        n, k = item["n"], item["k"]
        entries[(n, k)] = _parse_entry(item, f"{source}: entry {n}x{k}", n, k)
    for entry in (default, *entries.values()):
        for tile in entry.m_tiles:
            if tile.use_pdl and family not in PDL_FAMILIES:
                raise ValueError(f"{source}: entry {entry.key}: use_pdl needs SM90+ "
                                 f"(families {', '.join(PDL_FAMILIES)}); family is {family}")
            if tile.block_k is not None and family not in SWAP_AB_FAMILIES:
                raise ValueError(f"{source}: entry {entry.key}: m_tile block_k overrides are "
                                 f"for families {', '.join(SWAP_AB_FAMILIES)}, where the "
                                 f"invariance suite has proven them; family is {family}")
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
