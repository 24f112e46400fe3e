"""Where a kernel's PTX promotes its MMA partial sums: the K elements the MMA accumulates
between two full waits (`wgmma.wait_group 0`), after which the hand-promoting kernel
(`fp8_scaled_mm_pingpong.py`) adds the partial sum into its fp32 accumulator.

A warp-specialised tile must promote every PROMOTE_K elements of K, the family's interval
(`policy.tiles.FAMILY_PROMOTE_K`): its listing's groups must each hold PROMOTE_K / k_step
wgmma instructions. (Triton's own promotion inside `tl.dot` is not read this way: there the
interval is `max_num_imprecise_acc`, checked where the table is parsed.)
"""

from __future__ import annotations

import re

_WGMMA = re.compile(r"^\s*wgmma\.mma_async\S*\.m\d+n\d+k(\d+)\.")
_FULL_WAIT = re.compile(r"^\s*wgmma\.wait_group\.sync\.aligned\s+0\s*;")


def promotion_groups(ptx: str) -> list[int]:
    """K elements the wgmma instructions issued between consecutive full waits consume, in
    listing order (a group with no wgmma is not counted)."""
    groups, k = [], 0
    for line in ptx.splitlines():
        match = _WGMMA.match(line)
        if match:
            k += int(match.group(1))
        elif _FULL_WAIT.match(line) and k:
            groups.append(k)
            k = 0
    return groups


def promotion_problem(groups: list[int] | None, promote_k: int | None) -> str | None:
    """Why a warp-specialised listing does not promote every `promote_k` elements of K."""
    if groups is None:
        return None  # no listing (a compile failure, reported on its own)
    if not groups:
        return "no wgmma group closed by wgmma.wait_group 0: the promotion cannot be found"
    wrong = sorted({g for g in groups if g != promote_k})
    if wrong:
        return (f"promotes every {', '.join(map(str, wrong))} elements of K, not the "
                f"declared interval {promote_k}")
    return None
