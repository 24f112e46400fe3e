"""What a table tile with `warp_specialized` runs, and where a table may ask for it.

Such a tile runs `kernels/fp8_scaled_mm_pingpong.py`: two 64-row math warpgroups out of
phase behind a 1-warp TMA producer, on a persistent grid. Its reduction schedule is the TMA
tile's with BLOCK_K = the family's promotion interval (one interval per K step), so it may
share an entry, and an M class, with any other tile of the family; the sm90 suite compares
its bits with the TMA tile's and across M.

Its launch constants (not table fields: measured once, on the H100 prototype of
docs/kernel-promotion.md, and unchanged since) are here so the launcher and the lint agree.
"""

from __future__ import annotations

WARP_SPECIALIZED_FAMILIES = ("sm90",)
# The SM90 rule (policy.generic) serves its large-M tile (M > 256) warp-specialised for
# shapes no entry names with K at least this (None: never). Measured on one H100
# (tools/gpu_kernel_round3.sh, 2026-12-07): with K >= 4096 the kernel was faster than the TMA
# tile in every cell above M = 256 of 18 unnamed shapes (0.66-0.96x), same bits; at K <= 3072
# two of five shapes were slower in one cell (1.05x), where the few promotion intervals
# leave little for a second warpgroup to hide.
RULE_WARP_SPECIALIZED_MIN_K: int | None = 4096
# The Triton releases whose Gluon API the kernel is written against (Gluon is experimental:
# its warp_specialize and layout signatures have changed between releases). The lint
# compiles the kernel as a candidate only on these; a table that turns it on is compiled on
# any release, where a changed API is then reported as a compile failure.
GLUON_TRITON_RELEASES = ("3.6",)
BLOCK_M = 128            # two math warpgroups of 64 wgmma rows
BLOCK_NS = (64, 128)     # 256 would need 256 accumulator registers a thread (spills)
# Kernel-wide warps of the default (first math) partition; the workers add 4 + 1 warps.
NUM_WARPS = 4
MAXNREG = 168            # three warpgroups' worth of registers at one CTA per SM
MATH_REGS = 232          # registers of the second math partition (setmaxnreg)
LOAD_REGS = 40           # registers of the TMA producer warp
STAGGER = 1              # K steps the second math warpgroup starts behind the first
# Hopper's shared memory per CTA (227 KB) less what the barriers and the compiler keep.
SHARED_BYTES = 227 * 1024 - 2048


def shared_bytes(block_n: int, block_k: int, stages: int) -> int:
    """The ring: STAGES x (activation tile + weight tile), FP8 (one byte an element)."""
    return stages * (BLOCK_M + block_n) * block_k


def warp_specialized_problems(tile, entry, family: str, promote_k: int | None) -> list[str]:
    """Why `tile` (an MTile of `entry`, a TableEntry) cannot run the warp-specialised
    kernel; [] when it can or does not ask to."""
    if not tile.warp_specialized:
        return []
    block_n = tile.block_n or entry.block_n
    block_k = tile.block_k or entry.block_k
    problems = []
    if family not in WARP_SPECIALIZED_FAMILIES:
        return [f"warp_specialized is for families {', '.join(WARP_SPECIALIZED_FAMILIES)} "
                f"(Hopper wgmma, Gluon); family is {family}"]
    if promote_k is None or block_k != promote_k:
        problems.append(f"warp_specialized tiles step K by the promotion interval: block_k "
                        f"must be {promote_k}, got {block_k}")
    if tile.block_m != BLOCK_M:
        problems.append(f"warp_specialized tiles have block_m {BLOCK_M} (two 64-row math "
                        f"warpgroups); got {tile.block_m}")
    if block_n not in BLOCK_NS:
        problems.append(f"warp_specialized tiles take block_n in {BLOCK_NS}; got {block_n}")
    if not tile.use_tma or tile.swap_ab or tile.use_pdl or tile.prefetch_k \
            or tile.use_workspace:
        problems.append("warp_specialized tiles load by TMA and take no swap_ab, use_pdl, "
                        "prefetch_k or use_workspace (split-K runs in registers)")
    if shared_bytes(block_n, block_k, tile.num_stages) > SHARED_BYTES:
        problems.append(f"warp_specialized ring of {tile.num_stages} stages needs "
                        f"{shared_bytes(block_n, block_k, tile.num_stages)} bytes of shared "
                        f"memory; at most {SHARED_BYTES}")
    return problems


def gluon_release_supported() -> bool:
    """Whether the installed Triton is a release the kernel's Gluon code is written for."""
    import triton

    return ".".join(triton.__version__.split(".")[:2]) in GLUON_TRITON_RELEASES
