"""Turn tools/gpu_kernel_round3.sh's results into the SM90 table decision: which named
entries run their M > 256 tile warp-specialised, and whether the rule should for unnamed
shapes (`policy.warp_specialized.RULE_WARP_SPECIALIZED_MIN_K`, a constant set by hand).

    PYTHONPATH=. python tools/kernel_round3_apply.py OUT/kernel_round3.json [--write]

An entry turns on only where the kernel gave the current tile's bits in every measured cell
it ran and was no slower in any cell with M > 256 (issue 40: the shipped code never gets
slower on a measured cell). --write rewrites det_suite/policy/tables/sm90.json (checked to
load first); without it the decision is printed only. Exit 0; 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "det_suite/policy/tables/sm90.json"
LARGE_M = 256  # the m_tile turned on is the unbounded one (max_m null): M above this


def shape_verdicts(results: dict) -> dict[tuple[int, int], dict]:
    """(N, K) -> {origin, cells, wins, loses, differ} over cells with M > LARGE_M."""
    verdicts = {}
    for shapes in results["sets"].values():
        for shape in shapes:
            v = verdicts.setdefault((shape["n"], shape["k"]), {
                "origin": shape["origin"], "cells": 0, "wins": 0, "loses": 0, "differ": 0,
                "ratios": []})
            for cell in shape["cells"]:
                pp, cur = cell.get("pingpong", {}), cell.get("current", {})
                if "us" not in pp or "us" not in cur:
                    continue
                v["differ"] += not pp.get("equals_current", False)
                if cell["m"] <= LARGE_M:
                    continue
                v["cells"] += 1
                v["ratios"].append(round(pp["us"] / cur["us"], 3))
                v["wins" if pp["us"] <= cur["us"] else "loses"] += 1
    return verdicts


def enabled(v: dict) -> bool:
    return v["cells"] > 0 and v["loses"] == 0 and v["differ"] == 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    try:
        results = json.loads(args.results.read_text())
    except (OSError, ValueError) as exc:
        print(f"kernel_round3_apply: cannot read {args.results}: {exc}", file=sys.stderr)
        return 2
    if results.get("pingpong_error"):
        print(f"the kernel did not run on {results.get('device')}: {results['pingpong_error']}")
    verdicts = shape_verdicts(results)
    table = json.loads(TABLE.read_text())
    changed = []
    for entry in table["entries"]:
        v = verdicts.get((entry["n"], entry["k"]))
        if v is None:
            continue
        on = enabled(v)
        print(f"entry {entry['n']}x{entry['k']}: pingpong/current at M > {LARGE_M} "
              f"{v['ratios']}, bits differ in {v['differ']} -> {'ON' if on else 'off'}")
        for tile in entry["m_tiles"]:
            if tile["max_m"] is None and on and not tile.get("warp_specialized"):
                tile["warp_specialized"] = True
                changed.append(f"{entry['n']}x{entry['k']}")
    rule = {shape: v for shape, v in verdicts.items() if v["origin"] == "rule" and v["cells"]}
    # The smallest K from which every measured unnamed shape wins (None: none qualifies).
    min_k = None
    for k in sorted({shape[1] for shape in rule}, reverse=True):
        if not all(enabled(v) for shape, v in rule.items() if shape[1] >= k):
            break
        min_k = k
    print(f"rule: {sum(enabled(v) for v in rule.values())} of {len(rule)} unnamed shapes win "
          f"in every cell with M > {LARGE_M}; all with K >= {min_k} do -> "
          f"RULE_WARP_SPECIALIZED_MIN_K = {min_k} (det_suite/policy/warp_specialized.py; "
          "set by hand)")
    if args.write and changed:
        from det_suite.policy import parse_payload

        parse_payload(table, str(TABLE))
        TABLE.write_text(json.dumps(table, indent=1) + "\n")
        print(f"wrote {TABLE}: warp_specialized on for {', '.join(changed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
