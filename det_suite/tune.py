"""Regenerate a tile table for the GPU this runs on, rejecting anything not batch-invariant.

For each (N, K) the tuner searches *reductions* — (BLOCK_N, BLOCK_K, SPLIT_K), fixed per
entry because BLOCK_K and SPLIT_K are the reduction schedule (BLOCK_N does not change the
bits on SM90, design.md, but the table keeps it per (N, K) anyway) — and, inside each, the
launch *variants* M may choose: BLOCK_M from the family's instruction-safe set, warps,
pipeline stages, and the split-K workspace for small M.

Search, bounded by a time budget (device time is scarce):

1. Screen: every reduction (split counts limited by the K tiles, and by MAX_SMALL_M_WAVES
   where N alone already fills the GPU) timed with one representative variant per M of
   `screen_ms` (default 1, 16, 128, 2048, 8192); ranked by the geometric mean over M of
   (its time / the best reduction's time at that M). The best `keep` go on.
2. Sweep: for each finalist and each M of `class_ms`, one axis at a time around the
   representative variant (warps, stages, BLOCK_M, workspace and its fused fix-up, TMA
   loads where the family has TMA), then the combination of the per-axis winners. Each
   M-class keeps its fastest variant; adjacent classes with the same variant merge.
3. Prove: the chosen entry must pass `check_entry` before it is stored: accuracy against
   a float64 reference, then bitwise invariance on dense and on cancellation-stress
   operands: rows of m-row calls (m in `check_ms`, prefix and suffix subsets) equal the
   same rows of a `check_big_m`-row call, first with the tile M selects, then with every
   m_tile variant forced, each also at num_stages 2 and 3. A rejected entry is listed
   (with the first differing m) and the next finalist tried; if every finalist fails, one
   variant for all M is tried; failing that, the (N, K) keeps the base table's entry.

`budget_s` bounds the whole run: each shape gets its share of the remaining budget (the
first shape, which compiles most kernels, a double share), searches for
(1 - CHECK_RESERVE) of it and proves its entry in the rest (checks are never skipped, so
the last shape may overrun by its check time).

Timing uses `det_suite.bench.timing.flushed_median_us` (L2 flushed before every call: a
layer's weight comes from HBM in a real forward pass). Kernels for a batch of candidates
are compiled in parallel threads first (Triton's AsyncCompileMode) when available.

The output is a policy JSON in the format of det_suite/policy/tables/*.json plus a
`tuned_on` block and a `tuning` report, written atomically.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

from det_suite.platform.family import validate_family
from det_suite.bench.gemm import GemmShape, geometric_mean
from det_suite.policy import SUPPORTED_STAGES, LaunchConfig, MTile, TableEntry, TilePolicy

if TYPE_CHECKING:
    import torch

# BLOCK_M values whose tiles compile to one MMA instruction along K, per family (design.md:
# on SM90 16/32 are mma.sync k16, 64/128 wgmma k32; on SM100 16/32 mma.sync, 64/128
# tcgen05 and only 128 is proven; SM89/SM12x use mma.sync k32 for all four).
FAMILY_BLOCK_M = {
    "sm90": (64, 128),
    "sm120": (16, 32, 64, 128),
    "sm89": (16, 32, 64, 128),
    "sm100": (128,),
    "default": (64,),
}
# Token tiles of swapped-operand variants (weight on the MMA's row side, kernels/
# fp8_scaled_mm_swap_ab.py): only where the unswapped small tiles are instruction-unsafe and
# a TMA kernel exists. They compete at small M like any other BLOCK_M.
SWAP_BLOCK_M = {"sm90": (16, 32)}
SWAP_MAX_M = 32
BLOCK_N_CHOICES = (64, 128, 256)
BLOCK_K_CHOICES = (128,)  # 64 is allowed (--block-k 128 64)
SPLIT_K_CHOICES = (1, 2, 3, 4, 6, 8)
WARP_CHOICES = (4, 8)
STAGE_CHOICES = (3, 4, 5)
SCREEN_MS = (1, 16, 128, 2048, 8192)
CLASS_MS = (1, 16, 64, 128, 512, 2048, 8192)
CHECK_MS = (1, 7, 16, 33, 64, 65, 127, 129)
CHECK_BIG_M = 4097
CHECK_STAGES = (2, 3)
CHECK_SUBSETS = ("prefix", "suffix")
# Operand sets the invariance check runs on, in order: dense random FP8 (what a real layer
# sees) then the cancellation stress data (`invariance_operands`), on which any change of
# summation order shows. Dense random data alone misses most regroupings in BF16 output:
# on a 64x512 interpreter probe it never told split_k 1 from 2, stress data did 15 in 20
# single rows.
CHECK_DATA = ("dense", "stress")
WORKSPACE_MAX_M = 128  # the split-K workspace is a small-M device: never timed above this
# Families with the tensor-memory accelerator (TMA loads: same arithmetic, design of
# kernels/fp8_scaled_mm_tma.py; the invariance check still compares them bitwise).
TMA_FAMILIES = ("sm90", "sm100", "sm120")
# fp32 accumulator registers per thread above which a tile spills (BLOCK_M*BLOCK_N/threads).
MAX_ACC_REGS_PER_THREAD = 128
GROUP_M = 8
ACCURACY_M = 129
CHECK_RESERVE = 0.25   # share of a shape's budget kept for proving the chosen entry
SCREEN_SHARE = 0.5     # stage 1 may use at most this share of a shape's search budget
MAX_SMALL_M_WAVES = 4  # split-K counts whose M=1 grid exceeds this many waves are not tried
# The first shape compiles most kernels the later ones reuse (N and K are runtime
# arguments): on the 8 Qwen3 shapes ~80% of the distinct compiles fall in the first.
FIRST_SHAPE_WEIGHT = 2.0
SCHEMA = "det_suite.tune/1"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _next_pow2(value: int) -> int:
    return 1 << max(0, (int(value) - 1).bit_length())


def _floor_pow2(value: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(value, 1.0)))))


# ------------------------------------------------------------------ candidates

@dataclass(frozen=True, order=True)
class Reduction:
    """What an entry fixes for every M: the reduction schedule and BLOCK_N."""

    block_n: int
    block_k: int
    split_k: int

    @property
    def key(self) -> str:
        return f"bn{self.block_n}-bk{self.block_k}-sk{self.split_k}"


@dataclass(frozen=True, order=True)
class Variant:
    """What M may choose inside an entry (one m_tile without its bound)."""

    block_m: int
    num_warps: int
    num_stages: int
    use_workspace: bool = False
    use_tma: bool = False
    fused_fixup: bool = True  # workspace only: the last split program sums (one launch)
    swap_ab: bool = False     # block_m tokens on the MMA's narrow side (always TMA)

    def __post_init__(self):
        if not self.use_workspace:  # meaningless without the workspace: one spelling
            object.__setattr__(self, "fused_fixup", True)

    @property
    def key(self) -> str:
        return (f"bm{self.block_m}-w{self.num_warps}-s{self.num_stages}"
                + ("-ws" if self.use_workspace else "")
                + ("-unfused" if self.use_workspace and not self.fused_fixup else "")
                + ("-tma" if self.use_tma else "")
                + ("-swap" if self.swap_ab else ""))

    def tile(self, max_m: int | None) -> MTile:
        return MTile(max_m, self.block_m, self.num_warps, self.num_stages, self.use_workspace,
                     self.use_tma, self.fused_fixup, swap_ab=self.swap_ab)


def launch_config(red: Reduction, var: Variant, group_m: int = GROUP_M) -> LaunchConfig:
    return LaunchConfig(block_m=var.block_m, block_n=red.block_n, block_k=red.block_k,
                        num_warps=var.num_warps, num_stages=var.num_stages,
                        split_k=red.split_k, group_m=group_m,
                        use_workspace=var.use_workspace and red.split_k > 1,
                        use_tma=var.use_tma, fused_fixup=var.fused_fixup,
                        swap_ab=var.swap_ab)


def family_block_ms(family: str) -> tuple[int, ...]:
    validate_family(family)
    return FAMILY_BLOCK_M[family]


def k_tiles(k: int, block_k: int) -> int:
    return -(-k // block_k)


def valid_split_ks(k: int, block_k: int,
                   choices: Iterable[int] = SPLIT_K_CHOICES) -> tuple[int, ...]:
    """Split counts K allows: at most one chunk per K tile, and no empty chunk (chunks are
    whole BLOCK_K tiles, ceil(tiles / split) each)."""
    tiles = k_tiles(k, block_k)
    out = []
    for split in sorted(set(choices)):
        if split < 1 or split > tiles:
            continue
        chunk = -(-tiles // split)
        if -(-tiles // chunk) == split:
            out.append(split)
    return tuple(out)


def reduction_candidates(n: int, k: int, *, block_ns: Iterable[int] = BLOCK_N_CHOICES,
                         block_ks: Iterable[int] = BLOCK_K_CHOICES,
                         split_ks: Iterable[int] = SPLIT_K_CHOICES,
                         sm_count: int | None = None) -> list[Reduction]:
    """(BLOCK_N, BLOCK_K, SPLIT_K) candidates for an (N, K) entry. With `sm_count`, split
    counts > 1 whose small-M grid (N tiles x splits) would exceed MAX_SMALL_M_WAVES waves
    are left out: split-K exists to fill the GPU at small M, and past a few waves it only
    adds workspace traffic."""
    block_ns = sorted(set(block_ns))
    out = []
    for bk in sorted(set(block_ks)):
        for bn in block_ns:
            if bn > max(_next_pow2(n), block_ns[0]):
                continue  # a tile wider than N is all padding
            n_tiles = -(-n // bn)
            for split in valid_split_ks(k, bk, split_ks):
                if sm_count and split > 1 and n_tiles * split > MAX_SMALL_M_WAVES * sm_count:
                    continue
                out.append(Reduction(bn, bk, split))
    return out


def order_reductions(reds: Sequence[Reduction], n: int, sm_count: int) -> list[Reduction]:
    """Screening order (matters only when the budget truncates screening): reductions whose
    small-M grid (N tiles x splits) is closest to two waves of SMs first."""
    def score(red: Reduction):
        ctas = -(-n // red.block_n) * red.split_k
        return (abs(math.log2(ctas / (2.0 * sm_count))), red.split_k, abs(red.block_n - 128),
                red)
    return sorted(reds, key=score)


def block_m_choices(family: str, m: int) -> tuple[int, ...]:
    """Instruction-safe BLOCK_M values worth timing at M rows: nothing more than one power of
    two above M (beyond that a tile is padding), but always at least the smallest."""
    safe = family_block_ms(family)
    cap = max(safe[0], _next_pow2(m))
    return tuple(b for b in safe if b <= cap)


def swap_block_m_choices(family: str, m: int, *, tma: bool = True) -> tuple[int, ...]:
    """Token tiles of swapped variants worth timing at M rows (none above SWAP_MAX_M, none
    without TMA): like `block_m_choices`, nothing more than one power of two above M."""
    if not tma or not tma_allowed(family) or m > SWAP_MAX_M:
        return ()
    safe = SWAP_BLOCK_M.get(family, ())
    cap = max(safe[0], _next_pow2(m)) if safe else 0
    return tuple(b for b in safe if b <= cap)


def swap_variant(var: Variant, block_m: int) -> Variant:
    """`var` as a swapped variant with `block_m` tokens per tile (TMA loads, 4 warps: one
    warpgroup per 64 weight rows is what the swapped tiles were measured with)."""
    return replace(var, block_m=block_m, swap_ab=True, use_tma=True, num_warps=4)


def workspace_allowed(red: Reduction, m: int) -> bool:
    return red.split_k > 1 and m <= WORKSPACE_MAX_M


def tma_allowed(family: str) -> bool:
    return family in TMA_FAMILIES


def accumulator_fits(red: Reduction, var: Variant) -> bool:
    """False for tiles whose fp32 accumulator would spill (e.g. 128x256 on 4 warps)."""
    return var.block_m * red.block_n <= MAX_ACC_REGS_PER_THREAD * 32 * var.num_warps


def variant_space(family: str, m: int, red: Reduction, *, warps: Iterable[int] = WARP_CHOICES,
                  stages: Iterable[int] = STAGE_CHOICES, tma: bool = True) -> list[Variant]:
    """Every variant the tuner may time at M rows for this reduction."""
    ws_options = ((False, True), (True, True), (True, False)) if workspace_allowed(red, m) \
        else ((False, True),)
    tma_options = (False, True) if tma and tma_allowed(family) else (False,)
    out = [Variant(bm, w, s, ws, t, fused) for bm in block_m_choices(family, m)
           for w in sorted(warps) for s in sorted(stages) for ws, fused in ws_options
           for t in tma_options]
    out += [Variant(bm, 4, s, ws, True, fused, swap_ab=True)
            for bm in swap_block_m_choices(family, m, tma=tma)
            for s in sorted(stages) for ws, fused in ws_options]
    return [v for v in out if accumulator_fits(red, v)]


def representative_variant(family: str, m: int, red: Reduction, *,
                           warps: Sequence[int] = WARP_CHOICES,
                           stages: Sequence[int] = STAGE_CHOICES) -> Variant:
    """The one variant screening times: the smallest safe tile covering M (else the largest),
    4 warps for tiles up to 64 rows and 8 above, 4 stages for small M and 3 for large, the
    workspace whenever it is allowed."""
    choices = block_m_choices(family, m)
    bm = next((b for b in choices if b >= m), choices[-1])
    want_warps = 4 if bm <= 64 else 8
    w = want_warps if want_warps in warps else sorted(warps)[-1]
    want_stages = 4 if m <= WORKSPACE_MAX_M else 3
    s = want_stages if want_stages in stages else sorted(stages)[0]
    var = Variant(bm, w, s, workspace_allowed(red, m))
    if not accumulator_fits(red, var):
        var = replace(var, num_warps=sorted(warps)[-1])
    if not accumulator_fits(red, var):
        var = replace(var, block_m=choices[0])
    return var


def axis_variants(start: Variant, family: str, m: int, red: Reduction, *,
                  warps: Sequence[int] = WARP_CHOICES, stages: Sequence[int] = STAGE_CHOICES,
                  tma: bool = True) -> list[Variant]:
    """`start` and every variant that differs from it in exactly one axis (tiles whose
    accumulator would spill left out)."""
    out = [start]
    out += [replace(start, num_warps=w) for w in sorted(warps)]
    out += [replace(start, num_stages=s) for s in sorted(stages)]
    out += [replace(start, block_m=b) for b in block_m_choices(family, m)]
    if workspace_allowed(red, m):
        out.append(replace(start, use_workspace=not start.use_workspace))
    if start.use_workspace:
        out.append(replace(start, fused_fixup=not start.fused_fixup))
    if tma and tma_allowed(family):
        out.append(replace(start, use_tma=not start.use_tma))
    # Swapping changes several fields at once, so combine_axes never mixes it into another
    # variant; a swapped variant wins a class only by being the fastest timed outright.
    out += [swap_variant(start, b) for b in swap_block_m_choices(family, m, tma=tma)]
    return [v for v in dict.fromkeys(out) if accumulator_fits(red, v)]


def combine_axes(start: Variant, timed: dict[Variant, float | None]) -> Variant:
    """Per axis, the value whose one-axis variant was fastest; combined into one variant."""
    def best_along(attr: str):
        best, best_t = getattr(start, attr), timed.get(start)
        for var, t in timed.items():
            if t is None or var.swap_ab != start.swap_ab or any(
                    getattr(var, a) != getattr(start, a) for a in _AXES if a != attr):
                continue
            if best_t is None or t < best_t:
                best, best_t = getattr(var, attr), t
        return best
    return Variant(*(best_along(a) for a in _AXES), swap_ab=start.swap_ab)


_AXES = ("block_m", "num_warps", "num_stages", "use_workspace", "use_tma", "fused_fixup")


# ------------------------------------------------------------------ m-classes -> m_tiles

def class_bounds(ms: Sequence[int]) -> list[int | None]:
    """Upper bound (max_m) of each timed M's class: the power of two at or below the
    geometric midpoint to the next timed M (never below the M itself); the last is None."""
    ms = sorted(ms)
    bounds: list[int | None] = []
    for lo, hi in zip(ms, ms[1:]):
        bound = max(lo, _floor_pow2(math.sqrt(lo * hi)))
        bounds.append(min(bound, hi - 1))
    bounds.append(None)
    return bounds


def _tile_params(tile: MTile) -> tuple:
    return (tile.block_m, tile.num_warps, tile.num_stages, tile.use_workspace, tile.use_tma,
            tile.fused_fixup, tile.swap_ab)


def build_m_tiles(best: dict[int, Variant]) -> tuple[MTile, ...]:
    """m_tiles from the fastest variant per timed M.

    A workspace variant covers no M above the one it was timed at (its cost grows with M
    and nothing says it still wins there); if the largest class used the workspace, the
    unbounded tile is the same variant without it (same arithmetic, design.md).
    """
    if not best:
        raise ValueError("no timed M classes to build m_tiles from")
    ms = sorted(best)
    tiles = []
    for m, bound in zip(ms, class_bounds(ms)):
        var = best[m]
        if var.use_workspace:
            tiles.append(var.tile(m))
            if bound is None:
                tiles.append(replace(var, use_workspace=False).tile(None))
        else:
            tiles.append(var.tile(bound))
    merged: list[MTile] = []
    for tile in tiles:
        if merged and _tile_params(merged[-1]) == _tile_params(tile):
            merged[-1] = tile  # the later (wider) bound covers both
        else:
            merged.append(tile)
    return tuple(merged)


def rank_reductions(times: dict[Reduction, dict[int, float | None]],
                    ms: Sequence[int]) -> list[tuple[Reduction, float]]:
    """Reductions by the geometric mean over `ms` of time / best time at that M. A reduction
    missing a time at some M (failed, or not measured) ranks last (score inf)."""
    best_at = {}
    for m in ms:
        valid = [t[m] for t in times.values() if t.get(m) is not None]
        if valid:
            best_at[m] = min(valid)
    ranked = []
    for red, t in times.items():
        if all(t.get(m) is not None for m in ms) and all(m in best_at for m in ms):
            score = geometric_mean(t[m] / best_at[m] for m in ms)
        else:
            score = math.inf
        ranked.append((red, score))
    return sorted(ranked, key=lambda item: (item[1], item[0]))


# ------------------------------------------------------------------ serialization

def m_tile_text(tile: MTile) -> str:
    bound = tile.max_m if tile.max_m is not None else "inf"
    return (f"<={bound} bm{tile.block_m} w{tile.num_warps} s{tile.num_stages}"
            + (f" bn{tile.block_n}" if tile.block_n is not None else "")
            + (f" bk{tile.block_k}" if tile.block_k is not None else "")
            + (" ws" if tile.use_workspace else "")
            + (" unfused" if tile.use_workspace and not tile.fused_fixup else "")
            + (" tma" if tile.use_tma else "")
            + (" swap" if tile.swap_ab else "")
            + (" pdl" if tile.use_pdl else ""))


# MTile fields written only when set: a base table's entries pass through `entry_json`
# unchanged when tune writes its table, so every field a shipped table may use is here.
_OPTIONAL_TILE_FIELDS = ("block_n", "block_k", "swap_ab", "use_pdl")


def m_tile_json(tile: MTile) -> dict:
    raw = {"max_m": tile.max_m, "block_m": tile.block_m, "num_warps": tile.num_warps,
           "num_stages": tile.num_stages, "use_workspace": tile.use_workspace,
           "use_tma": tile.use_tma, "fused_fixup": tile.fused_fixup}
    raw.update({name: getattr(tile, name) for name in _OPTIONAL_TILE_FIELDS
                if getattr(tile, name) not in (None, False)})
    return raw


def entry_json(entry: TableEntry) -> dict:
    raw = {} if entry.n is None else {"n": entry.n, "k": entry.k}
    raw.update({"block_n": entry.block_n, "block_k": entry.block_k, "split_k": entry.split_k,
                "group_m": entry.group_m, "m_tiles": [m_tile_json(t) for t in entry.m_tiles]})
    return raw


def make_entry(n: int, k: int, red: Reduction, tiles: Sequence[MTile],
               group_m: int = GROUP_M) -> TableEntry:
    """A TableEntry, validated by the same parser that loads tables."""
    from det_suite.policy import _parse_entry

    entry = TableEntry(n=n, k=k, block_n=red.block_n, block_k=red.block_k,
                       split_k=red.split_k, group_m=group_m, m_tiles=tuple(tiles))
    return _parse_entry(entry_json(entry), f"tuned entry {n}x{k}", n, k)


# ------------------------------------------------------------------ proving an entry

class EntryLike(Protocol):
    def select(self, m: int) -> LaunchConfig: ...
    def variants(self) -> tuple[LaunchConfig, ...]: ...


@dataclass(frozen=True)
class CheckFailure:
    kind: str           # "accuracy" | "invariance" | "determinism" | "launch"
    m: int | None       # rows of the call that differed (the first, in check order)
    subset: str | None  # "prefix" | "suffix" | "all"
    config: dict | None
    selected: bool      # the config M selects (True) or a forced variant/stage (False)
    detail: str
    data: str = ""      # operands: "dense" | "stress" | "given" (accuracy: "dense")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    comparisons: int
    failure: CheckFailure | None = None

    @property
    def first_differing_m(self) -> int | None:
        return self.failure.m if self.failure else None


def invariance_operands(m: int, n: int, k: int, *, device, seed: int = 0,
                        pairs: int = 4) -> tuple["torch.Tensor", "torch.Tensor"]:
    """(a (m, K), w [N, K]) FP8 operands on which any change of summation order shows.

    Dense small values (|x| in [2**-5, 2**-3]) plus, in every row, `pairs` cancelling
    product pairs: a[:, p] = a[:, q] large and w[:, q] = -w[:, p] = +-448. Exactly the pairs
    cancel, but while a +-L (up to 2**17.6) sits in the running sum every addition rounds
    at ulp(L) = 2**-6, far coarser than the BF16 ulp of the small true result; regroup
    the sum (another split, another K-tile order, another MMA instruction) and the
    rounding, hence the output bits, change.
    """
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(seed)

    def dense(shape):
        mag = (torch.rand(shape, generator=gen, device=device) * 0.75 + 0.25) * 2.0 ** -3
        sign = torch.randint(0, 2, shape, generator=gen, device=device) * 2 - 1
        return mag * sign

    a = dense((m, k))
    w = dense((n, k))
    pairs = max(0, min(pairs, k // 2))
    if pairs:
        pos = torch.randperm(k, generator=gen, device=device)[: 2 * pairs]
        p, q = pos[:pairs], pos[pairs:]
        big = torch.rand((m, pairs), generator=gen, device=device) * 384.0 + 64.0
        a[:, p] = big
        a[:, q] = big
        sign = (torch.randint(0, 2, (n, pairs), generator=gen, device=device) * 2 - 1) * 448.0
        w[:, p] = sign.float()
        w[:, q] = -sign.float()
    return a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)


def _config_dict(config: LaunchConfig) -> dict:
    return asdict(config)


def _unique(configs: Iterable[LaunchConfig]) -> list[LaunchConfig]:
    return list(dict.fromkeys(configs))


def _run(a, w_kn, config: LaunchConfig, n: int):
    import torch

    from det_suite.ops import launch_fp8_gemm

    one = torch.ones(1, dtype=torch.float32, device=a.device)
    out = torch.empty((a.shape[0], n), dtype=torch.bfloat16, device=a.device)
    return launch_fp8_gemm(a, w_kn, one, one, None, out, config)


def _diff_text(out, ref) -> str:
    differing = int((out != ref).sum())
    max_abs = float((out.float() - ref.float()).abs().max())
    return f"{differing} of {ref.numel()} outputs differ (max |diff| {max_abs:.4g})"


def check_entry_accuracy(entry: EntryLike, n: int, k: int, *, device, m: int = ACCURACY_M,
                         stages: Sequence[int] = CHECK_STAGES, seed: int = 0) -> CheckResult:
    """Every config the entry can launch gives the right product on dense random data."""
    import torch

    from det_suite.bench.gemm import check_accuracy, random_fp8

    gen = torch.Generator(device=device)
    gen.manual_seed(seed + 17)
    a = random_fp8((m, k), generator=gen, device=device)
    w = random_fp8((n, k), generator=gen, device=device)
    ref = a.double() @ w.double().t()  # exact products, fp64 sums: no TF32, no doubt
    configs = _unique([entry.select(m)] + [replace(v, num_stages=s) for v in entry.variants()
                                            for s in (v.num_stages, *stages)])
    for config in configs:
        try:
            out = _run(a, w.t(), config, n)
        except Exception as exc:  # noqa: BLE001 - a config that cannot launch is rejected
            return CheckResult(False, 0, CheckFailure("launch", m, "all", _config_dict(config),
                                                      False, f"{type(exc).__name__}: {exc}",
                                                      "dense"))
        acc = check_accuracy(out, ref)
        if not acc.ok:
            return CheckResult(False, 0, CheckFailure("accuracy", m, "all",
                                                      _config_dict(config), False, acc.reason,
                                                      "dense"))
    return CheckResult(True, len(configs))


def dense_operands(m: int, n: int, k: int, *, device,
                   seed: int = 0) -> tuple["torch.Tensor", "torch.Tensor"]:
    """(a (m, K), w [N, K]) dense random FP8, no zeros (the benchmark's data)."""
    import torch

    from det_suite.bench.gemm import random_fp8

    gen = torch.Generator(device=device)
    gen.manual_seed(seed + 29)
    return (random_fp8((m, k), generator=gen, device=device),
            random_fp8((n, k), generator=gen, device=device))


def check_invariance(entry: EntryLike, n: int, k: int, *, device,
                     check_ms: Sequence[int] = CHECK_MS, big_m: int = CHECK_BIG_M,
                     stages: Sequence[int] = CHECK_STAGES,
                     subsets: Sequence[str] = CHECK_SUBSETS, data: str = "stress",
                     operands=None, seed: int = 0) -> CheckResult:
    """Bitwise batch invariance of an entry (anything with select(m) and variants()).

    Reference: the `big_m`-row call with the config `entry.select(big_m)`, run twice (must
    agree with itself). Then, in this order, the first mismatch is the failure:
    1. for m in check_ms ascending, each subset of rows (prefix: the first m, suffix: the
       last m, what a cache hit computes), the config M selects;
    2. the same rows with every variant forced, at its own stages and at each of `stages`;
    3. every forced config on all `big_m` rows.
    `data` picks the operands ("stress": `invariance_operands`, "dense": `dense_operands`);
    `operands` (a (big_m, K), w [N, K] FP8) overrides both.

    Under TRITON_INTERPRET, tl.dot is numpy's matmul, whose BLAS kernel rounds a row
    differently depending on its position in the tile; only prefix subsets with a single
    BLOCK_M are meaningful there (on a GPU every row of an MMA is computed alike).
    """
    import torch

    ms = sorted(set(int(m) for m in check_ms))
    if not ms or ms[0] < 1 or ms[-1] >= big_m:
        raise ValueError(f"check_ms must lie in [1, big_m={big_m}); got {list(check_ms)}")
    unknown = [name for name in subsets if name not in CHECK_SUBSETS]
    if not subsets or unknown:
        raise ValueError(f"subsets must be drawn from {CHECK_SUBSETS}; got {list(subsets)}")
    if operands is None:
        if data == "stress":
            operands = invariance_operands(big_m, n, k, device=device, seed=seed)
        elif data == "dense":
            operands = dense_operands(big_m, n, k, device=device, seed=seed)
        else:
            raise ValueError(f"data must be 'stress' or 'dense'; got {data!r}")
    else:
        data = "given"
    a_big, w = operands
    if tuple(a_big.shape) != (big_m, k) or tuple(w.shape) != (n, k):
        raise ValueError(f"operands must be a ({big_m}, {k}) and w ({n}, {k}); got "
                         f"{tuple(a_big.shape)} and {tuple(w.shape)}")
    w_kn = w.t()
    comparisons = 0

    def fail(kind, m, subset, config, selected, detail):
        return CheckResult(False, comparisons, CheckFailure(kind, m, subset,
                                                            _config_dict(config), selected,
                                                            detail, data))

    ref_config = entry.select(big_m)
    try:
        ref = _run(a_big, w_kn, ref_config, n)
        again = _run(a_big, w_kn, ref_config, n)
    except Exception as exc:  # noqa: BLE001
        return fail("launch", big_m, "all", ref_config, True, f"{type(exc).__name__}: {exc}")
    comparisons += 1
    if not torch.equal(ref, again):
        return fail("determinism", big_m, "all", ref_config, True,
                    "two identical calls differ: " + _diff_text(again, ref))

    forced = _unique(replace(v, num_stages=s) for v in entry.variants()
                     for s in (v.num_stages, *stages))

    def row_subsets(m):
        rows = {"prefix": slice(0, m), "suffix": slice(big_m - m, big_m)}
        return [(name, rows[name]) for name in subsets]

    passes = [(m, True, [entry.select(m)]) for m in ms]
    passes += [(m, False, forced) for m in ms]
    for m, selected, configs in passes:
        for subset, rows in row_subsets(m):
            for config in configs:
                try:
                    out = _run(a_big[rows], w_kn, config, n)
                except Exception as exc:  # noqa: BLE001
                    return fail("launch", m, subset, config, selected,
                                f"{type(exc).__name__}: {exc}")
                comparisons += 1
                if not torch.equal(out, ref[rows]):
                    return fail("invariance", m, subset, config, selected,
                                _diff_text(out, ref[rows]))
    for config in forced:
        try:
            out = _run(a_big, w_kn, config, n)
        except Exception as exc:  # noqa: BLE001
            return fail("launch", big_m, "all", config, False, f"{type(exc).__name__}: {exc}")
        comparisons += 1
        if not torch.equal(out, ref):
            return fail("invariance", big_m, "all", config, False, _diff_text(out, ref))
    return CheckResult(True, comparisons)


def check_entry(entry: EntryLike, n: int, k: int, *, device, check_ms=CHECK_MS,
                big_m: int = CHECK_BIG_M, stages=CHECK_STAGES, subsets=CHECK_SUBSETS,
                data: Sequence[str] = CHECK_DATA, seed: int = 0) -> CheckResult:
    """Accuracy first (cheap), then invariance on each operand set of `data` in order; the
    first failure rejects the entry (its `data` says which operands showed it)."""
    result = check_entry_accuracy(entry, n, k, device=device, stages=stages, seed=seed)
    if not result.passed:
        return result
    comparisons = result.comparisons
    for kind in data:
        result = check_invariance(entry, n, k, device=device, check_ms=check_ms, big_m=big_m,
                                  stages=stages, subsets=subsets, data=kind, seed=seed)
        comparisons += result.comparisons
        if not result.passed:
            break
    return replace(result, comparisons=comparisons)


# ------------------------------------------------------------------ parallel compilation

class _WarmupProxy:
    """Stands in for a JIT kernel inside `launch_fp8_gemm`: `kernel[grid](...)` compiles
    (through `warmup`, which returns a future under AsyncCompileMode) instead of running."""

    def __init__(self, kernel):
        self._kernel = kernel

    def __getitem__(self, grid):
        def warm(*args, **kwargs):
            return self._kernel.warmup(*args, grid=grid, **kwargs)
        return warm


def precompile_launches(calls: Sequence[Callable[[], Any]], *, workers: int | None = None,
                        log: Callable[[str], None] = _stderr) -> bool:
    """Compile the kernels `calls` (each a launch through det_suite.ops.launch_fp8_gemm)
    would need, in parallel threads, without running them. The argument lists are the
    real ones (launch_fp8_gemm builds them), so the compiled kernels land in the JIT cache
    under the keys the real launches look up. Returns False (and compiles nothing) where
    Triton has no AsyncCompileMode; kernels then compile at first launch as usual."""
    if not calls:
        return True
    try:
        from triton import AsyncCompileMode
    except ImportError:
        try:
            from triton.runtime._async_compile import AsyncCompileMode
        except ImportError:
            return False
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import ExitStack
    from unittest import mock

    import det_suite.ops as ops

    # Every JIT kernel launch_fp8_gemm can reach (pointer, TMA, split-K reduction): it looks
    # them up among ops' globals at launch time, so patching them there redirects it.
    names = getattr(ops, "GEMM_LAUNCH_KERNELS", None) or [
        name for name in vars(ops) if name.endswith("_kernel")]
    kernels = [name for name in names if callable(getattr(getattr(ops, name, None), "warmup",
                                                          None))]
    workers = workers or max(1, min(32, (os.cpu_count() or 2)))
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool, \
                AsyncCompileMode(pool, ignore_errors=True), ExitStack() as patches:
            for name in kernels:
                patches.enter_context(mock.patch.object(ops, name,
                                                        _WarmupProxy(getattr(ops, name))))
            failed = []
            for call in calls:
                try:
                    call()
                except Exception as exc:  # noqa: BLE001 - the real launch reports it
                    failed.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        if failed:
            log(f"{len(failed)} of {len(calls)} launches not precompiled (they compile at "
                f"first launch); first: {failed[0]}")
    except Exception as exc:  # noqa: BLE001
        log(f"parallel compile unavailable ({type(exc).__name__}: {exc}); compiling serially")
        return False
    return True


def _launch_call(a, w_kn, a_scale, w_scale, out, config: LaunchConfig) -> Callable[[], Any]:
    from det_suite.ops import launch_fp8_gemm

    return lambda: launch_fp8_gemm(a, w_kn, a_scale, w_scale, None, out, config)


# ------------------------------------------------------------------ the tuner

Measure = Callable[[Reduction, Variant, int, int, int], "float | None"]
Checker = Callable[[TableEntry, int, int], CheckResult]


@dataclass
class TuneSettings:
    family: str
    screen_ms: tuple[int, ...] = SCREEN_MS
    class_ms: tuple[int, ...] = CLASS_MS
    block_ns: tuple[int, ...] = BLOCK_N_CHOICES
    block_ks: tuple[int, ...] = BLOCK_K_CHOICES
    split_ks: tuple[int, ...] = SPLIT_K_CHOICES
    warps: tuple[int, ...] = WARP_CHOICES
    stages: tuple[int, ...] = STAGE_CHOICES
    keep: int = 3
    budget_s: float = 300.0
    check_ms: tuple[int, ...] = CHECK_MS
    check_big_m: int = CHECK_BIG_M
    check_stages: tuple[int, ...] = CHECK_STAGES
    check_subsets: tuple[str, ...] = CHECK_SUBSETS
    check_data: tuple[str, ...] = CHECK_DATA
    tma: bool = True
    warmup_ms: float = 5.0
    rep_ms: float = 20.0
    seed: int = 0
    group_m: int = GROUP_M
    parallel_compile: bool = True
    compile_workers: int | None = None

    def validate(self) -> "TuneSettings":
        validate_family(self.family)
        problems = []
        for name in ("screen_ms", "class_ms", "block_ns", "block_ks", "split_ks", "warps",
                     "stages", "check_ms"):
            values = getattr(self, name)
            if not values or any(int(v) < 1 for v in values):
                problems.append(f"{name} must be non-empty positive integers")
        for name in ("block_ns", "block_ks", "warps"):
            if any(v & (v - 1) for v in getattr(self, name)):
                problems.append(f"{name} must be powers of two")
        if any(b < 32 for b in self.block_ks):
            problems.append("block_ks must be >= 32 (one FP8 MMA step)")
        for name in ("stages", "check_stages"):
            bad = [s for s in getattr(self, name) if s not in SUPPORTED_STAGES]
            if bad:
                problems.append(f"{name} {bad} not in {SUPPORTED_STAGES}")
        if not self.check_subsets or any(x not in CHECK_SUBSETS for x in self.check_subsets):
            problems.append(f"check_subsets must be drawn from {CHECK_SUBSETS}")
        if not self.check_data or any(x not in CHECK_DATA for x in self.check_data):
            problems.append(f"check_data must be drawn from {CHECK_DATA}")
        if self.check_ms and max(self.check_ms) >= self.check_big_m:
            problems.append("check_big_m must exceed every check_ms value")
        if self.keep < 1:
            problems.append("keep must be >= 1")
        if self.budget_s <= 0:
            problems.append("budget_s must be positive")
        if problems:
            raise ValueError("; ".join(problems))
        return self


@dataclass
class ShapeOutcome:
    shape: GemmShape
    entry: TableEntry | None
    status: str                      # "tuned" | "single-variant" | "base"
    chosen: str | None
    score: float | None
    screened: list[str]
    finalists: list[str]
    timings_us: dict[str, dict[int, dict[str, float | None]]]
    best_us: dict[int, float]
    rejected: list[dict]
    comparisons: int
    elapsed_s: float
    budget_s: float
    truncated: bool

    def to_json(self) -> dict:
        return {
            "shape": self.shape.name, "n": self.shape.n, "k": self.shape.k,
            "status": self.status, "chosen": self.chosen, "score": self.score,
            "entry": entry_json(self.entry) if self.entry else None,
            "best_us": {str(m): t for m, t in self.best_us.items()},
            "screened": self.screened, "finalists": self.finalists,
            "invariance_comparisons": self.comparisons,
            "elapsed_s": round(self.elapsed_s, 2), "budget_s": round(self.budget_s, 2),
            "truncated_by_budget": self.truncated,
            "timings_us": {red: {str(m): per_m for m, per_m in by_m.items()}
                           for red, by_m in self.timings_us.items()},
        }


class Tuner:
    """Tunes one family's entries on one device. `measure` (red, var, m, n, k) -> us or
    None, and `check` (entry, n, k) -> CheckResult are injectable (tests); by default they
    time and check on `device` for real. `clock` is injectable for budget tests."""

    def __init__(self, settings: TuneSettings, *, device=None, measure: Measure | None = None,
                 check: Checker | None = None, log: Callable[[str], None] = _stderr,
                 clock: Callable[[], float] = time.monotonic, sm_count: int | None = None):
        self.settings = settings.validate()
        self.device = device
        self.measure = measure or self._gpu_measure
        self.check = check or self._default_check
        self.log = log
        self.clock = clock
        self.sm_count = sm_count or self._sm_count()
        self._operands: dict[tuple, Any] = {}
        self._operands_shape: tuple[int, int] | None = None
        self._progress = ""
        self._started = clock()

    # ---------------------------------------------------------------- real device hooks

    def _sm_count(self) -> int:
        try:
            import torch

            if self.device is not None and torch.device(self.device).type == "cuda":
                return torch.cuda.get_device_properties(self.device).multi_processor_count
        except Exception:  # noqa: BLE001
            pass
        return 132  # H100/H200

    def _gemm_operands(self, n: int, k: int, m: int):
        import torch

        from det_suite.bench.gemm import random_fp8, scale_tensor

        if self._operands_shape != (n, k):
            self._operands.clear()
            if self.device is not None and torch.device(self.device).type == "cuda":
                torch.cuda.empty_cache()
            self._operands_shape = (n, k)
            gen = torch.Generator(device=self.device)
            gen.manual_seed(self.settings.seed * 7919 + n * 31 + k)
            w = random_fp8((n, k), generator=gen, device=self.device)
            self._operands["w"] = (w, scale_tensor(1.0 / 16, self.device),
                                   scale_tensor(1.0 / math.sqrt(k), self.device), gen)
        if m not in self._operands:
            gen = self._operands["w"][3]
            a = random_fp8((m, k), generator=gen, device=self.device)
            out = torch.empty((m, n), dtype=torch.bfloat16, device=self.device)
            self._operands[m] = (a, out)
        w, a_scale, w_scale, _ = self._operands["w"]
        a, out = self._operands[m]
        return a, w.t(), a_scale, w_scale, out

    def _launcher(self, red: Reduction, var: Variant, m: int, n: int, k: int):
        a, w_kn, a_scale, w_scale, out = self._gemm_operands(n, k, m)
        return _launch_call(a, w_kn, a_scale, w_scale, out,
                            launch_config(red, var, self.settings.group_m))

    def _gpu_measure(self, red: Reduction, var: Variant, m: int, n: int, k: int):
        import torch

        from det_suite.bench.timing import flushed_median_us

        fn = self._launcher(red, var, m, n, k)
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: not a candidate
            self.log(f"{self._progress} {red.key} {var.key} M={m}: cannot launch "
                     f"({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
            return None
        return flushed_median_us(fn, warmup_ms=self.settings.warmup_ms,
                                 rep_ms=self.settings.rep_ms)

    def _default_check(self, entry: TableEntry, n: int, k: int) -> CheckResult:
        s = self.settings
        return check_entry(entry, n, k, device=self.device, check_ms=s.check_ms,
                           big_m=s.check_big_m, stages=s.check_stages,
                           subsets=s.check_subsets, data=s.check_data, seed=s.seed)

    def _precompile(self, jobs: Sequence[tuple[Reduction, Variant, int]], n: int, k: int):
        if not self.settings.parallel_compile or self.measure != self._gpu_measure:
            return
        from det_suite.platform.family import interpreter_active

        if interpreter_active():
            return
        t0 = self.clock()
        calls = [self._launcher(red, var, m, n, k) for red, var, m in jobs]
        if precompile_launches(calls, workers=self.settings.compile_workers, log=self.log):
            self.log(f"{self._progress} compiled {len(calls)} launch configs in parallel "
                     f"({self.clock() - t0:.1f}s)")

    def _precompile_check(self, entry: TableEntry, n: int, k: int) -> None:
        """Compile what the default check will launch, in parallel: every forced config at
        each row-count specialization the check's m values fall into (Triton specializes
        integer arguments on divisibility by 16: m = 1, 7, 16 stand for all of them)."""
        if self.check != self._default_check or not self.settings.parallel_compile:
            return
        import torch

        from det_suite.platform.family import interpreter_active

        if interpreter_active() or self.device is None \
                or torch.device(self.device).type != "cuda":
            return
        s = self.settings
        configs = list(dict.fromkeys(
            [replace(v, num_stages=st) for v in entry.variants()
             for st in (v.num_stages, *s.check_stages)]))
        calls = []
        for m in (1, 7, 16):
            for config in configs:
                a, w_kn, a_scale, w_scale, out = self._gemm_operands(n, k, m)
                calls.append(_launch_call(a, w_kn, a_scale, w_scale, out, config))
        t0 = self.clock()
        if precompile_launches(calls, workers=s.compile_workers, log=self.log):
            self.log(f"{self._progress} compiled {len(calls)} check launches in parallel "
                     f"({self.clock() - t0:.1f}s)")

    # ---------------------------------------------------------------- search

    def tune(self, shapes: Sequence[GemmShape]) -> list[ShapeOutcome]:
        self._started = self.clock()
        outcomes = []
        weights = [FIRST_SHAPE_WEIGHT] + [1.0] * (len(shapes) - 1)
        for index, shape in enumerate(shapes):
            spent = self.clock() - self._started
            share = (max(0.0, self.settings.budget_s - spent) * weights[index]
                     / sum(weights[index:]))
            self._progress = f"[tune {index + 1}/{len(shapes)} {shape.name} {shape.dims}]"
            outcomes.append(self.tune_shape(shape, share))
        return outcomes

    def tune_shape(self, shape: GemmShape, budget_s: float) -> ShapeOutcome:
        s = self.settings
        n, k = shape.n, shape.k
        start = self.clock()
        search_s = budget_s * (1.0 - CHECK_RESERVE)
        deadline = start + search_s
        times: dict[Reduction, dict[int, dict[Variant, float | None]]] = {}
        truncated = False

        def record(red: Reduction, var: Variant, m: int, stage: str) -> None:
            per_m = times.setdefault(red, {}).setdefault(m, {})
            if var in per_m:
                return
            t = self.measure(red, var, m, n, k)
            per_m[var] = t
            used = self.clock() - self._started
            self.log(f"{self._progress} {stage} {red.key} M={m} {var.key}: "
                     f"{'failed' if t is None else f'{t:.1f} us'} "
                     f"({used:.0f}s of {s.budget_s:.0f}s)")

        # 1. screen every reduction with one representative variant per M
        reds = order_reductions(reduction_candidates(n, k, block_ns=s.block_ns,
                                                     block_ks=s.block_ks, split_ks=s.split_ks,
                                                     sm_count=self.sm_count),
                                n, self.sm_count)
        if not reds:
            raise ValueError(f"no reduction candidates for {n}x{k} (K too small for "
                             f"BLOCK_K {s.block_ks}?)")
        screen_ms = sorted(set(s.screen_ms))
        screened: list[Reduction] = []
        batch = 6
        for first in range(0, len(reds), batch):
            if screened and self.clock() > start + SCREEN_SHARE * search_s:
                truncated = True
                break
            chunk = reds[first:first + batch]
            jobs = [(red, self._representative(m, red), m) for red in chunk for m in screen_ms]
            self._precompile(jobs, n, k)
            for red in chunk:
                if screened and self.clock() > start + SCREEN_SHARE * search_s:
                    truncated = True
                    break
                for m in screen_ms:
                    record(red, self._representative(m, red), m, "screen")
                screened.append(red)
        screen_best = {red: {m: self._best_time(times, red, m) for m in screen_ms}
                       for red in screened}
        ranked = [(r, sc) for r, sc in rank_reductions(screen_best, screen_ms)
                  if math.isfinite(sc)]
        finalists = [r for r, _ in ranked[: s.keep]]
        if not finalists:
            raise RuntimeError(f"{n}x{k}: no reduction candidate could be timed at every "
                               f"screening M {screen_ms}")

        # 2. sweep variants around the representative, per class M, for each finalist
        class_ms = sorted(set(s.class_ms))
        swept: list[Reduction] = []
        for red in finalists:
            if swept and self.clock() > deadline:
                truncated = True
                break
            starts = {m: self._representative(m, red) for m in class_ms}
            axes = {m: axis_variants(starts[m], s.family, m, red, warps=s.warps,
                                     stages=s.stages, tma=s.tma) for m in class_ms}
            self._precompile([(red, v, m) for m in class_ms for v in axes[m]], n, k)
            for m in class_ms:
                for var in axes[m]:
                    record(red, var, m, "sweep")
            combos = {m: combine_axes(starts[m], {v: times[red][m].get(v) for v in axes[m]})
                      for m in class_ms}
            self._precompile([(red, combos[m], m) for m in class_ms
                              if combos[m] not in times[red][m]], n, k)
            for m in class_ms:
                record(red, combos[m], m, "combine")
            swept.append(red)

        # 3. rank the swept finalists on class_ms; prove and store the best that passes
        final_ms = class_ms if swept else screen_ms
        pool = swept or finalists
        final_best = {red: {m: self._best_time(times, red, m) for m in final_ms}
                      for red in pool}
        final_ranked = [(r, sc) for r, sc in rank_reductions(final_best, final_ms)
                        if math.isfinite(sc)]
        rejected: list[dict] = []
        comparisons = 0
        chosen: tuple[TableEntry, Reduction, float, str] | None = None
        for red, score in final_ranked:
            best_vars = {m: self._best_variant(times, red, m) for m in final_ms}
            entry = make_entry(n, k, red, build_m_tiles(best_vars), s.group_m)
            result = self._checked(entry, n, k, red, rejected, "tuned")
            comparisons += result.comparisons
            if result.passed:
                chosen = (entry, red, score, "tuned")
                break
        if chosen is None and final_ranked:
            # One variant for every M: nothing in the launch depends on M at all.
            red, score = final_ranked[0]
            var = self._best_variant(times, red, final_ms[-1])
            var = replace(var, use_workspace=False)
            entry = make_entry(n, k, red, (var.tile(None),), s.group_m)
            result = self._checked(entry, n, k, red, rejected, "single-variant")
            comparisons += result.comparisons
            if result.passed:
                chosen = (entry, red, score, "single-variant")
        best_us = {}
        for m in final_ms:
            valid = [final_best[r][m] for r in final_best if final_best[r][m] is not None]
            if valid:
                best_us[m] = min(valid)
        if chosen is None:
            self.log(f"{self._progress} every candidate was rejected; {n}x{k} keeps the base "
                     "table's entry")
        else:
            self.log(f"{self._progress} chosen {chosen[1].key} ({chosen[3]}): "
                     + ", ".join(m_tile_text(t) for t in chosen[0].m_tiles))
        return ShapeOutcome(
            shape=shape, entry=chosen[0] if chosen else None,
            status=chosen[3] if chosen else "base",
            chosen=chosen[1].key if chosen else None, score=chosen[2] if chosen else None,
            screened=[r.key for r in screened], finalists=[r.key for r in finalists],
            timings_us={red.key: {m: {v.key: t for v, t in per_m.items()}
                                  for m, per_m in by_m.items()}
                        for red, by_m in times.items()},
            best_us=best_us, rejected=rejected, comparisons=comparisons,
            elapsed_s=self.clock() - start, budget_s=budget_s, truncated=truncated)

    def _checked(self, entry: TableEntry, n: int, k: int, red: Reduction,
                 rejected: list[dict], status: str) -> CheckResult:
        self._precompile_check(entry, n, k)
        result = self.check(entry, n, k)
        if result.passed:
            self.log(f"{self._progress} {red.key} ({status}) passed: {result.comparisons} "
                     "bitwise comparisons")
        else:
            failure = result.failure
            self.log(f"{self._progress} REJECTED {red.key} ({status}): {failure.kind} at "
                     f"m={failure.m} ({failure.subset} rows, {failure.data} data): "
                     f"{failure.detail}")
            rejected.append({"n": n, "k": k, "reduction": red.key, "candidate": status,
                             "entry": entry_json(entry),
                             "first_differing_m": result.first_differing_m,
                             "failure": failure.to_json()})
        return result

    def _representative(self, m: int, red: Reduction) -> Variant:
        s = self.settings
        return representative_variant(s.family, m, red, warps=s.warps, stages=s.stages)

    @staticmethod
    def _best_time(times, red: Reduction, m: int) -> float | None:
        valid = [t for t in times.get(red, {}).get(m, {}).values() if t is not None]
        return min(valid) if valid else None

    @staticmethod
    def _best_variant(times, red: Reduction, m: int) -> Variant:
        per_m = {v: t for v, t in times[red][m].items() if t is not None}
        return min(per_m, key=lambda v: (per_m[v], v))


# ------------------------------------------------------------------ output

def tuned_on(device=None) -> dict:
    """Where and with what a table was tuned."""
    import torch
    import triton

    from det_suite import __version__
    from det_suite.platform.family import interpreter_active
    from det_suite.reports.environment import git_revision

    info = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "triton": triton.__version__,
            "det_suite": __version__, "git_revision": git_revision(),
            "triton_interpret": interpreter_active()}
    if torch.cuda.is_available() and not interpreter_active():
        props = torch.cuda.get_device_properties(device if device is not None else 0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                    multiprocessors=props.multi_processor_count)
    else:
        info.update(gpu=None, capability=None, multiprocessors=None)
    return info


def tuned_policy_json(base: TilePolicy, outcomes: Sequence[ShapeOutcome],
                      settings: TuneSettings, tuned_on_info: dict,
                      elapsed_s: float | None = None) -> dict:
    """The table: base default, base entries, tuned entries replacing base ones."""
    entries = {key: entry_json(entry) for key, entry in base.entries.items()}
    for outcome in outcomes:
        if outcome.entry is not None:
            entries[(outcome.shape.n, outcome.shape.k)] = entry_json(outcome.entry)
    tuned = [o.shape.dims for o in outcomes if o.entry is not None]
    kept = [o.shape.dims for o in outcomes if o.entry is None]
    gpu = tuned_on_info.get("gpu") or "no GPU (Triton interpreter)"
    note = (f"Tuned by `det-suite tune` on {gpu} from {base.source or 'the shipped table'}; "
            f"entries tuned and proven invariant here: {', '.join(tuned) or 'none'}")
    if kept:
        note += f"; every candidate rejected (base entry kept): {', '.join(kept)}"
    settings_json = asdict(settings)
    return {
        "family": base.family,
        "expected_mma": base.expected_mma,
        "note": note + ".",
        "tuned_on": {**tuned_on_info, "elapsed_s": None if elapsed_s is None
                     else round(elapsed_s, 1), "budget_s": settings.budget_s},
        "default": entry_json(base.default),
        "entries": [entries[key] for key in sorted(entries)],
        "tuning": {
            "schema": SCHEMA,
            "timing": "median us per call, L2 flushed before every call (do_bench)",
            "settings": settings_json,
            "shapes": [o.to_json() for o in outcomes],
            "rejected": [r for o in outcomes for r in o.rejected],
        },
    }


def write_tuned_policy(path, payload: dict):
    """Check the payload loads as a policy, then write it atomically."""
    from det_suite.policy import parse_policy
    from det_suite.reports.files import write_json_atomic

    parse_policy(json.loads(json.dumps(payload, default=str)), str(path))
    return write_json_atomic(path, payload)
