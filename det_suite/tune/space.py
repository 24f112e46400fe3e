"""The search space: what an entry fixes (a `Reduction`), what M may choose inside it (a
`Variant`), and which of them are worth timing on a family.

A reduction is (BLOCK_N, BLOCK_K, SPLIT_K), fixed per (N, K) entry because BLOCK_K and
SPLIT_K are the reduction schedule (BLOCK_N does not change the bits on SM90, docs/invariance-rule.md,
but the table keeps it per (N, K) anyway). A variant is one launch M may pick: BLOCK_M
from the family's instruction-safe set, warps, pipeline stages, the split-K workspace for
small M, TMA loads, swapped operands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from det_suite.platform.family import validate_family
from det_suite.policy import LaunchConfig, MTile

# BLOCK_M values whose tiles compile to one MMA instruction along K, per family (docs/invariance-rule.md:
# on SM90 16/32 are mma.sync k16, 64/128 wgmma k32; on SM100 16/32 mma.sync, 64/128
# tcgen05 and only 128 is proven; SM89/SM12x use mma.sync k32 for all four).
FAMILY_BLOCK_M = {
    "sm90": (64, 128),
    "sm120": (16, 32, 64, 128),
    "sm89": (16, 32, 64, 128),
    "sm100": (128,),
    "default": (64,),
}
# Token tiles of swapped-operand variants (weight on the MMA's row side, SWAP_AB in
# kernels/fp8_scaled_mm_tma.py): only where the unswapped small tiles are instruction-unsafe and
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
WORKSPACE_MAX_M = 128  # the split-K workspace is a small-M device: never timed above this
# Families with the tensor-memory accelerator (TMA loads: same arithmetic, design of
# kernels/fp8_scaled_mm_tma.py; the invariance check still compares them bitwise).
TMA_FAMILIES = ("sm90", "sm100", "sm120")
# fp32 accumulator registers per thread above which a tile spills (BLOCK_M*BLOCK_N/threads).
MAX_ACC_REGS_PER_THREAD = 128
GROUP_M = 8
MAX_SMALL_M_WAVES = 4  # split-K counts whose M=1 grid exceeds this many waves are not tried


def next_pow2(value: int) -> int:
    return 1 << max(0, (int(value) - 1).bit_length())


def floor_pow2(value: float) -> int:
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
        return MTile(max_m=max_m, block_m=self.block_m, num_warps=self.num_warps,
                     num_stages=self.num_stages, use_workspace=self.use_workspace,
                     use_tma=self.use_tma, fused_fixup=self.fused_fixup, swap_ab=self.swap_ab)


def launch_config(red: Reduction, var: Variant, group_m: int = GROUP_M, *,
                  promote_k: int | None = None) -> LaunchConfig:
    return LaunchConfig(block_m=var.block_m, block_n=red.block_n, block_k=red.block_k,
                        num_warps=var.num_warps, num_stages=var.num_stages,
                        split_k=red.split_k, group_m=group_m,
                        use_workspace=var.use_workspace and red.split_k > 1,
                        use_tma=var.use_tma, fused_fixup=var.fused_fixup,
                        swap_ab=var.swap_ab, promote_k=promote_k)


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
            if bn > max(next_pow2(n), block_ns[0]):
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
    cap = max(safe[0], next_pow2(m))
    return tuple(b for b in safe if b <= cap)


def swap_block_m_choices(family: str, m: int, *, tma: bool = True) -> tuple[int, ...]:
    """Token tiles of swapped variants worth timing at M rows (none above SWAP_MAX_M, none
    without TMA): like `block_m_choices`, nothing more than one power of two above M."""
    if not tma or not tma_allowed(family) or m > SWAP_MAX_M:
        return ()
    safe = SWAP_BLOCK_M.get(family, ())
    cap = max(safe[0], next_pow2(m)) if safe else 0
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
                    getattr(var, a) != getattr(start, a) for a in AXES if a != attr):
                continue
            if best_t is None or t < best_t:
                best, best_t = getattr(var, attr), t
        return best
    return Variant(*(best_along(a) for a in AXES), swap_ab=start.swap_ab)


AXES = ("block_m", "num_warps", "num_stages", "use_workspace", "use_tma", "fused_fixup")
