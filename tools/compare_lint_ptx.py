#!/usr/bin/env python3
"""Do two trees compile every launch variant to the same PTX? Compare two
`det-suite lint-policy --json` results variant by variant (table, target, entry, kernel,
tile, stages, split-K, TMA, fix-up, launch, PDL) by the sha256 of each PTX listing.

A restructuring that leaves the PTX of every variant unchanged leaves the GPU evidence of
the kernels standing. PTX carries the kernels' source paths (`.file`), so run both lints
from the same absolute path (e.g. a worktree whose det_suite/ is swapped between runs) with
the same Triton:

    python tools/compare_lint_ptx.py old.json new.json   # exit 0: identical, 1: not

A kernel renamed between the trees (two kernels merged into one, say) is named with
`--renamed OLD=NEW`: the old tree's variants of OLD are then keyed as NEW's, and, given the
listings of both lints (`lint-policy --ptx-dir`, passed as `--ptx OLD_DIR NEW_DIR`), each
listing is compared with the old name replaced by the new one, the only difference a
rename makes to PTX (the entry's and its parameters' names). Without the listings a renamed
kernel's variants compare by their raw hashes, and differ. With the listings, debug
information (`.loc` source lines, inline-site labels, DWARF sections) is left out of the
comparison, so code moved to a shared `@triton.jit` helper compares as the code it is.

Exit status 2 on unusable input.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
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


def listing_hash(ptx_dir: Path, kernel: str, arch: str, digest: str,
                 renamed: dict[str, str]) -> str:
    """sha256 of the listing `lint-policy --ptx-dir` wrote for a variant, with every
    renamed kernel's old name replaced by its new one."""
    matches = sorted(ptx_dir.glob(f"{kernel}-{arch}-{digest[:12]}.ptx"))
    if not matches:
        raise ValueError(f"{ptx_dir} holds no listing {kernel}-{arch}-{digest[:12]}.ptx")
    text = code_of(matches[0].read_text())
    for old_name, new_name in renamed.items():
        text = text.replace(old_name, new_name)
    return hashlib.sha256(text.encode()).hexdigest()


def code_of(ptx: str) -> str:
    """A listing without its debug information (source lines, file table, inline-site
    labels, DWARF sections): moving a kernel's source lines changes only those."""
    code = ptx.split("\t.section\t.debug", 1)[0]
    return "\n".join(line for line in code.splitlines()
                     if not DEBUG_LINE.match(line))


DEBUG_LINE = re.compile(r"\s*(\.loc\s|\.file\s|//|\$L__tmp\d+:\s*$)")


def variant_hashes(lint: dict, renamed: dict[str, str] | None = None,
                   ptx_dir: Path | None = None) -> dict[tuple, str | None]:
    """(family, arch, entry key, *VARIANT_KEY) -> PTX sha256 for every compiled variant;
    `renamed` kernels keyed by their new names, and with `ptx_dir` every hash taken over
    the listing with the renames applied."""
    renamed = renamed or {}
    out = {}
    for table in lint["tables"]:
        for entry in table["entries"]:
            for variant in entry["variants"]:
                kernel = variant.get("kernel")
                key = (table["family"], table["arch"], entry["key"],
                       *(renamed.get(kernel, kernel) if name == "kernel" else variant.get(name)
                         for name in VARIANT_KEY))
                if key in out:
                    raise ValueError(f"two variants share the key {key}")
                digest = variant.get("ptx_sha256")
                if ptx_dir is not None and digest is not None:
                    digest = listing_hash(ptx_dir, kernel, table["arch"], digest, renamed)
                out[key] = digest
    return out


def compare(old: dict, new: dict, renamed: dict[str, str] | None = None,
            ptx_dirs: tuple[Path, Path] | None = None) -> dict:
    old_dir, new_dir = ptx_dirs or (None, None)
    a = variant_hashes(old, renamed, old_dir)
    b = variant_hashes(new, None, new_dir)
    return {
        "variants_old": len(a), "variants_new": len(b),
        "only_old": sorted(map(str, set(a) - set(b))),
        "only_new": sorted(map(str, set(b) - set(a))),
        "different_ptx": sorted(str(k) for k in set(a) & set(b) if a[k] != b[k]),
        "identical": sum(1 for k in set(a) & set(b) if a[k] == b[k] and a[k] is not None),
        "triton": [old.get("triton_version"), new.get("triton_version")],
        "renamed": dict(renamed or {}), "listings_compared": ptx_dirs is not None,
    }


def parse_renames(pairs: list[str]) -> dict[str, str]:
    renamed = {}
    for pair in pairs:
        old_name, sep, new_name = pair.partition("=")
        if not (sep and old_name and new_name):
            raise ValueError(f"--renamed expects OLD=NEW, got {pair!r}")
        renamed[old_name] = new_name
    return renamed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="lint JSON of the reference tree")
    parser.add_argument("new", type=Path, help="lint JSON of the tree under test")
    parser.add_argument("--json", type=Path, help="also write the comparison here")
    parser.add_argument("--renamed", action="append", default=[], metavar="OLD=NEW",
                        help="a kernel the old tree names OLD and the new one NEW (repeatable)")
    parser.add_argument("--ptx", nargs=2, type=Path, metavar=("OLD_DIR", "NEW_DIR"),
                        help="the lints' --ptx-dir listings: compare them, renames applied")
    args = parser.parse_args(argv)
    try:
        result = compare(load(args.old), load(args.new), parse_renames(args.renamed),
                         tuple(args.ptx) if args.ptx else None)
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
          f"(Triton {result['triton'][0]} / {result['triton'][1]})"
          + (f"; renamed {result['renamed']}, listings compared with the new names"
             if result["renamed"] and result["listings_compared"] else ""))
    for name in ("different_ptx", "only_old", "only_new"):
        for key in result[name][:20]:
            print(f"  {name}: {key}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
