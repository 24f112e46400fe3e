#!/usr/bin/env python3
"""Do two trees compile every launch variant to the same PTX? Compare two
`det-suite lint-policy --json` results variant by variant (table, target, entry, kernel,
tile, stages, split-K, TMA, fix-up, launch, PDL) by the sha256 of each PTX listing.

A restructuring that leaves the PTX of every variant unchanged leaves the GPU evidence of
the kernels standing. PTX carries the kernels' source paths (`.file`), so run both lints
from the same absolute path (e.g. a worktree whose det_suite/ is swapped between runs) with
the same Triton:

    python tools/compare_lint_ptx.py old.json new.json   # exit 0: identical, 1: not

Exit status 2 on unusable input.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

VARIANT_KEY = ("kernel", "label", "tile", "num_stages", "split_k", "tma", "fixup", "launch",
               "pdl")


def load(path: Path) -> dict:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    result = json.loads(data)
    return result.get("lint", result)


def variant_hashes(lint: dict) -> dict[tuple, str | None]:
    """(family, arch, entry key, *VARIANT_KEY) -> PTX sha256 for every compiled variant."""
    out = {}
    for table in lint["tables"]:
        for entry in table["entries"]:
            for variant in entry["variants"]:
                key = (table["family"], table["arch"], entry["key"],
                       *(variant.get(name) for name in VARIANT_KEY))
                if key in out:
                    raise ValueError(f"two variants share the key {key}")
                out[key] = variant.get("ptx_sha256")
    return out


def compare(old: dict, new: dict) -> dict:
    a, b = variant_hashes(old), variant_hashes(new)
    return {
        "variants_old": len(a), "variants_new": len(b),
        "only_old": sorted(map(str, set(a) - set(b))),
        "only_new": sorted(map(str, set(b) - set(a))),
        "different_ptx": sorted(str(k) for k in set(a) & set(b) if a[k] != b[k]),
        "identical": sum(1 for k in set(a) & set(b) if a[k] == b[k] and a[k] is not None),
        "triton": [old.get("triton_version"), new.get("triton_version")],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="lint JSON of the reference tree")
    parser.add_argument("new", type=Path, help="lint JSON of the tree under test")
    parser.add_argument("--json", type=Path, help="also write the comparison here")
    args = parser.parse_args(argv)
    try:
        result = compare(load(args.old), load(args.new))
    except (OSError, ValueError, KeyError) as exc:
        print(f"compare_lint_ptx: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    same = not (result["only_old"] or result["only_new"] or result["different_ptx"])
    result["same"] = same
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['identical']} of {result['variants_old']} (old) / {result['variants_new']} "
          f"(new) variants compile to identical PTX; {len(result['different_ptx'])} differ, "
          f"{len(result['only_old'])} only in old, {len(result['only_new'])} only in new "
          f"(Triton {result['triton'][0]} / {result['triton'][1]})")
    for name in ("different_ptx", "only_old", "only_new"):
        for key in result[name][:20]:
            print(f"  {name}: {key}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
