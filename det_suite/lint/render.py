"""A lint result as text (`det-suite lint-policy`'s output) or Markdown (reports): one row per
tile M can select, its variants folded into counts; the fixed kernels; then warnings,
violations and the status line. Works on the plain data of `LintResult.to_dict()`."""

from __future__ import annotations

from det_suite.lint.variants import LAUNCH_SINGLE_PASS
from det_suite.reports.tables import markdown_table, text_table

TILE_HEADER = ["arch", "table", "role", "entry", "M", "BLOCK_M", "BLOCK_N", "warps", "stages",
               "variants", "instruction", "status"]
FIXED_HEADER = ["kernel", "arch", "result", "status"]
VARIANT_HEADER = ["arch", "table", "entry", "kernel", "variant", "instruction"]


def _status_cell(status: str) -> str:
    return "OK" if status == "ok" else status.upper()


def _tile_variants(vs: list[dict]) -> str:
    """'12 (EVEN_K T/F, K%16!=0, M 1/16, TMA+pointer loads, ...)' for one tile's variants."""
    parts = []
    evens = sorted({v["even_k"] for v in vs}, reverse=True)
    parts.append("EVEN_K " + "/".join("T" if e else "F" for e in evens))
    if any(v["k"] % 16 for v in vs):
        parts.append("K%16!=0")
    ms = sorted({v["m"] for v in vs})
    parts.append("M " + "/".join(str(m) for m in ms))
    loads = [name for name, tma in (("TMA", True), ("pointer", False))
             if any(v["tma"] == tma for v in vs)]
    if any(v.get("swap_ab") for v in vs):
        loads[0] = "swapped TMA"
    if loads != ["pointer"]:
        parts.append("+".join(loads) + " loads")
    fixups = sorted({v["fixup"] for v in vs if v["write_partials"]})
    if fixups:
        parts.append("partials+" + "/".join(fixups))
    if any(v["launch"] == LAUNCH_SINGLE_PASS for v in vs):
        parts.append("single-pass")
    return f"{len(vs)} ({', '.join(parts)})"


def tile_rows(data: dict) -> list[list[str]]:
    """One row per (target, table, entry, m_tile); sub-variants folded into counts."""
    rows = []
    for table in data["tables"]:
        for entry in table["entries"]:
            tiles: dict[int, list[dict]] = {}
            for v in entry["variants"]:
                tiles.setdefault(v["tile"], []).append(v)
            for index in sorted(tiles):
                vs = tiles[index]
                first = vs[0]
                stages = sorted({(v["num_stages"], v["stages_source"]) for v in vs})
                stage_text = ",".join(f"{s}{'*' if src == 'table' else ''}" for s, src in stages)
                summaries = list(dict.fromkeys(v["summary"] for v in vs if v["expects_mma"]))
                rows.append([
                    table["arch"], table["family"], table["role"], entry["key"],
                    first["m_range"], str(first["block_m"]), str(first["block_n"]),
                    str(first["num_warps"]), stage_text, _tile_variants(vs),
                    " | ".join(summaries), _status_cell(entry["status"]),
                ])
    return rows


def fixed_rows(data: dict) -> list[list[str]]:
    """One row per (fixed kernel, result), its targets joined."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for f in data["fixed_kernels"]:
        grouped.setdefault((f["kernel"], f["summary"], f["status"]), []).append(f["arch"])
    return [[kernel, ", ".join(arches), summary, _status_cell(status)]
            for (kernel, summary, status), arches in grouped.items()]


def legend(data: dict) -> str:
    stages = ", ".join(str(s) for s in data["override_stages"]) or "none"
    return (f"Triton {data['triton_version']}, PTX cross-compiled on CPU. Each row is one tile "
            f"M can select; stages marked * are the table's, the others the num_stages "
            f"overrides linted ({stages}); 'variants' counts the PTX listings compiled for the "
            "tile (K-tail, misaligned-K and M=1 specialisations; TMA and pointer loads; "
            "workspace launches with their fix-up, and the single-pass check).")


def variant_count(data: dict) -> int:
    """Launch variants linted: the PTX listings of every table entry (cached or compiled).
    lint-policy's status line and the report both count with this."""
    return sum(len(e["variants"]) for t in data.get("tables", []) for e in t["entries"])


def status_line(data: dict) -> str:
    entries = sum(len(t["entries"]) for t in data["tables"])
    variants = variant_count(data)
    verdict = "OK" if data["ok"] else f"FAILED ({len(data['violations'])} violation(s))"
    return (f"lint-policy: {len(data['tables'])} table x target pairs, {entries} entries, "
            f"{variants} variants ({data['compiled']} compiled, {data['cache_hits']} cached) in "
            f"{data['seconds']} s: {verdict}")


def render_text(data: dict, verbose: bool = False) -> str:
    """`det-suite lint-policy`'s output for a lint result dict; `verbose`: every variant."""
    parts = [text_table(TILE_HEADER, tile_rows(data))]
    if data["fixed_kernels"]:
        parts.append(text_table(FIXED_HEADER, fixed_rows(data)))
    if verbose:
        rows = [[t["arch"], t["family"], e["key"], v["kernel"], v["label"], v["summary"]]
                for t in data["tables"] for e in t["entries"] for v in e["variants"]]
        parts.append(text_table(VARIANT_HEADER, rows))
    parts.append(legend(data))
    for text in data["warnings"]:
        parts.append(f"warning: {text}")
    for text in data["violations"]:
        parts.append(f"VIOLATION: {text}")
    parts.append(status_line(data))
    return "\n\n".join(parts)


def render_markdown(data: dict) -> str:
    """Markdown for a lint result dict (`LintResult.to_dict()` / `instruction_table()`)."""
    parts = ["## MMA instruction per tile (policy lint)", legend(data),
             markdown_table(TILE_HEADER, tile_rows(data))]
    if data["fixed_kernels"]:
        parts += ["Kernels without a tile table (checked to hold no MMA):",
                  markdown_table(FIXED_HEADER, fixed_rows(data))]
    if data["violations"]:
        parts.append("Violations:\n\n" + "\n".join(f"- {t}" for t in data["violations"]))
    if data["warnings"]:
        parts.append("Warnings:\n\n" + "\n".join(f"- {t}" for t in data["warnings"]))
    parts.append(status_line(data))
    return "\n\n".join(parts) + "\n"
