"""What a tile table holds: launch configs, row-count classes (m_tiles), (N, K) entries and
a family's table, and how an entry selects a config for M.

The JSON format these are read from and written to is `det_suite.policy.table_format`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property

SUPPORTED_STAGES = (2, 3, 4, 5, 6, 7, 8)
# wgmma's row count: what a swapped (swap_ab) tile runs with when TMA is ruled out.
SWAP_FALLBACK_BLOCK_M = 64
# FP32 promotion interval along K, a constant of the family (never of M or BLOCK_K): Hopper's
# FP8 wgmma accumulates with fewer mantissa bits than fp32, so every PROMOTE_K elements of K
# the MMA's partial sum is added into a full fp32 accumulator (what cuBLAS's default, CUTLASS
# and DeepGEMM do). Triton promotes inside one tl.dot only when its K (BLOCK_K) is at least
# the interval, so a family with an interval needs BLOCK_K multiples of it (checked at load).
# SM89/SM120 mma.sync and SM100 tcgen05 take no interval here: Triton applies none there
# (`max_num_imprecise_acc` is a wgmma-only option); their accuracy is measured, not assumed.
# SM90 promotes every 256, not 128: on the H200 both measured within 1.003x of cuBLAS
# default's error against fp64 at K up to 28672 (the promotion probe of evidence run
# h200-2026-12-03-c, docs/evidence/HISTORY.md), while Triton drains the MMA pipeline at each
# promotion point, so 256 halves those stalls (decode geomean vs torch._scaled_mm 0.99
# against 1.15 with 128; docs/kernel-promotion.md).
FAMILY_PROMOTE_K = {"sm90": 256}
# FP8 elements in one 128-byte L2 line: the unit a tile's weight prefetch (prefetch_k) counts in.
L2_LINE_ELEMENTS = 128


def promotion_k(family: str) -> int | None:
    return FAMILY_PROMOTE_K.get(family)


@dataclass(frozen=True, kw_only=True)
class TileParams:
    """What a row class of a table entry chooses, and so what a launch carries from it: the
    one list of tile parameters. `MTile` (the table) and `LaunchConfig` (the launch) both
    take their fields from here, and the table format reads and writes them by name; a new
    tile parameter is a field here, its use in the kernel, and its check in the lint."""

    block_m: int
    num_warps: int
    num_stages: int
    use_workspace: bool = False  # split-K partials in a workspace (entries with split_k > 1)
    use_tma: bool = False  # loads only: TMA descriptors instead of pointer loads
    fused_fixup: bool = True  # workspace path: last split program sums, no second launch
    # Programmatic dependent launch (SM90+): the GEMM may be launched while the previous
    # kernel on the stream drains, and waits (griddepcontrol.wait) before touching memory.
    # Moves the launch, never the arithmetic.
    use_pdl: bool = False
    # TMA tiles only (SM90): the weight on wgmma's 64-row side, block_m tokens on its narrow
    # side (SWAP_AB in fp8_scaled_mm_tma.py). Where the operands rule TMA out, the pointer
    # kernel runs the tile unswapped with SWAP_FALLBACK_BLOCK_M rows instead.
    swap_ab: bool = False
    # PDL TMA tiles only: K elements of its weight rows each program asks L2 to fetch before
    # it waits for the previous grid (0: none). The weight is never written by the kernels
    # a GEMM follows, so the fetch may overlap them; the loads after the wait read the same
    # bytes, from L2 instead of DRAM. Moves memory traffic, never the arithmetic.
    prefetch_k: int = 0
    # SM90 only: the warp-specialised persistent kernel (fp8_scaled_mm_pingpong.py, two math
    # warpgroups out of phase behind a TMA producer); the same schedule as the TMA tile.
    warp_specialized: bool = False


TILE_PARAMS: tuple[str, ...] = tuple(f.name for f in fields(TileParams))


@dataclass(frozen=True, kw_only=True)
class LaunchConfig(TileParams):
    """Everything one launch of the FP8 GEMM needs besides its tensors: the selected tile's
    parameters (`TileParams`) and its entry's reduction."""

    block_n: int
    block_k: int
    split_k: int
    group_m: int
    # FP32 promotion interval along K (FAMILY_PROMOTE_K); None: the MMA accumulates unpromoted.
    promote_k: int | None = None
    # A warp-specialised tile's persistent grid: at most this many programs (0: one per tile). The
    # launcher sets the device's SM count; it moves work between programs, never the arithmetic.
    max_programs: int = 0

    def k_chunk(self, k: int) -> int:
        """Elements of K per split chunk: whole BLOCK_K tiles, so no tile straddles chunks."""
        tiles = -(-k // self.block_k)
        return -(-tiles // self.split_k) * self.block_k

    def k_partition(self, k: int) -> tuple[int, int, int]:
        """How K is cut: the chunk length, the number of chunks, and the K the MMA steps
        run to (K padded to whole BLOCK_K tiles; a padded step adds zero products, which
        the accumulator may still round). Part of `reduction_schedule`, not all of it."""
        return (self.k_chunk(k), self.split_k, -(-k // self.block_k) * self.block_k)

    def reduction_schedule(self, k: int) -> "ReductionSchedule":
        """Every launch field that changes the arithmetic for a K (policy.schedule_identity):
        two configs with equal schedules must give the same bits; M must never change it."""
        from det_suite.policy.schedule_identity import reduction_schedule
        return reduction_schedule(self, k)


@dataclass(frozen=True, kw_only=True)
class MTile(TileParams):
    """One row-count class: rows up to `max_m` (None = unbounded) use these parameters."""

    max_m: int | None
    # Overrides the entry's BLOCK_K for this row class (SM90 named entries only): the MMA
    # still steps through K in k32 steps in the same order, so only the number of steps per
    # loop iteration changes. Allowed where K is a multiple of both BLOCK_Ks and the chunks
    # stay the same, so the steps, chunks and padding are identical (checked at load).
    block_k: int | None = None
    # Overrides the entry's BLOCK_N for this row class. Only for families whose tiles of every
    # BLOCK_N share one MMA K step and input type (SM90 wgmma n64/n128/n256: docs/invariance-rule.md's
    # second probe found them bit-identical); the lint and the invariance suite re-prove it.
    block_n: int | None = None

    def params(self) -> dict:
        """The tile's `TileParams`, by name (what a launch config takes from it)."""
        return {name: getattr(self, name) for name in TILE_PARAMS}


@dataclass(frozen=True)
class TableEntry:
    n: int | None  # None for the family default
    k: int | None
    block_n: int
    block_k: int
    split_k: int
    group_m: int
    m_tiles: tuple[MTile, ...]
    promote_k: int | None = None  # the family's, set when a table is parsed

    def select(self, m: int) -> LaunchConfig:
        for tile, config in zip(self.m_tiles, self._configs):
            if tile.max_m is None or m <= tile.max_m:
                return config
        raise AssertionError("validated tables end with an unbounded m_tile")

    @cached_property
    def _configs(self) -> tuple[LaunchConfig, ...]:
        # Each tile's launch config, built once: select is on every GEMM call's path.
        return tuple(LaunchConfig(
            **{**tile.params(), "use_workspace": tile.use_workspace and self.split_k > 1},
            block_n=tile.block_n or self.block_n, block_k=tile.block_k or self.block_k,
            split_k=self.split_k, group_m=self.group_m, promote_k=self.promote_k)
            for tile in self.m_tiles)

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
    # The device's SM count, when the policy serves one device: shapes no entry names then
    # get the family's generic rule (policy.generic) instead of the default entry.
    sm_count: int | None = None

    def entry(self, n: int, k: int) -> TableEntry:
        named = self.entries.get((n, k))
        if named is not None:
            return named
        if self.sm_count:
            from det_suite.policy.generic import generic_entry
            rule = generic_entry(self.family, n, k, self.sm_count)
            if rule is not None:
                return rule
        return self.default

    def entry_origin(self, n: int, k: int) -> str:
        """Where (N, K)'s tiles come from: "named", "rule" or "default"."""
        if (n, k) in self.entries:
            return "named"
        if self.sm_count:
            from det_suite.policy.generic import RULE_FAMILIES
            if self.family in RULE_FAMILIES:
                return "rule"
        return "default"

    def on_device(self, sm_count: int | None) -> "TilePolicy":
        """This table serving a device with `sm_count` SMs (None: unnamed shapes take the
        default entry)."""
        return replace(self, sm_count=sm_count)

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
