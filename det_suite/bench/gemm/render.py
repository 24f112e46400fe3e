"""The GEMM benchmark as people read it: the aligned per-mode table the command prints and
the Markdown report (a shape x M grid of det/torch ratios per mode, docs/invariance-rule.md's layout, and
the cells behind it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from det_suite.bench import MODE_DESCRIPTIONS
from det_suite.bench.gemm.results import REFERENCE_VENDOR, CellResult, summarize
from det_suite.reports.tables import markdown_table

if TYPE_CHECKING:
    from det_suite.bench.gemm.results import BenchRun


def config_text(config: dict | None) -> str:
    if not config:
        return "-"
    text = (f"bm{config['block_m']} bn{config['block_n']} bk{config['block_k']} "
            f"sk{config['split_k']} w{config['num_warps']} s{config['num_stages']}")
    workspace = config.get("use_workspace")
    return (text + (" ws" if workspace else "")
            + (" unfused" if workspace and not config.get("fused_fixup", True) else "")
            + (" tma" if config.get("use_tma") else "")
            + (" swap" if config.get("swap_ab") else "")
            + (" pdl" if config.get("use_pdl") else ""))


def fmt(value: float | None, digits: int = 1) -> str:
    """A number with `digits` decimals, '-' for none."""
    return "-" if value is None else f"{value:.{digits}f}"


def format_mode_table(mode: str, cells: Sequence[CellResult],
                      vendor_names: Sequence[str] = (REFERENCE_VENDOR,)) -> str:
    """Plain-text table: shape x M with det us, torch us, ratio, floor ratio (+ vendors).

    Numbers are right-aligned (shape and config left), which `reports.tables.text_table`
    does not do, hence the own layout here."""
    others = [v for v in vendor_names if v != REFERENCE_VENDOR]
    header = (["shape", "N", "K", "M", "det us", "torch us", "ratio", "floor x"]
              + [f"{v} us" for v in others] + ["config"])
    rows = []
    for c in cells:
        det = "WRONG" if c.errors else fmt(c.det_us)
        rows.append([c.shape.name, str(c.shape.n), str(c.shape.k), str(c.m), det,
                     fmt(c.torch_us), fmt(c.ratio, 3), fmt(c.floor_ratio, 2)]
                    + [("ERR" if v in c.vendor_errors else fmt(c.vendor_us.get(v)))
                       for v in others]
                    + [config_text(c.config)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    left = {0, len(header) - 1}

    def line(values):
        return "  ".join(v.ljust(w) if i in left else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [f"mode {mode}: {MODE_DESCRIPTIONS.get(mode, mode)}", line(header),
           line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    for c in cells:
        for err in c.errors:
            out.append(f"  ERROR {c.shape.name} M={c.m}: {err}")
        for name, err in c.vendor_errors.items():
            out.append(f"  vendor {name} {c.shape.name} M={c.m}: {err}")
    out.append(summarize(mode, cells).line())
    return "\n".join(out)


def fmt_error(cell: CellResult | None) -> str:
    """'det / cuBLAS (ratio)' for a probed cell, '-' otherwise."""
    if cell is None or not cell.fp64_error:
        return "-"
    e = cell.fp64_error
    return f"{e['det']:.2e} / {e['reference']:.2e} ({e['ratio']:.2f}x)"


def format_markdown(run: BenchRun) -> str:
    """Per mode: a shape x M grid of det/torch ratios (docs/invariance-rule.md's layout) and the details."""
    lines = ["# det-suite FP8 GEMM benchmark", ""]
    env = run.environment or {}
    lines.append(f"Machine: {env.get('machine', '?')}; torch {env.get('torch', '?')}, "
                 f"triton {env.get('triton', '?')}; policy: {run.policy_source}.")
    if run.copy_bandwidth:
        lines.append(f"Device-to-device copy: {run.copy_bandwidth / 1e12:.2f} TB/s "
                     "(bytes read + written); floor = FP8 weight bytes / that rate.")
    lines.append("")
    for mode, cells in run.cells.items():
        ms = sorted({c.m for c in cells})
        shapes = list(dict.fromkeys(c.shape for c in cells))
        by_key = {(c.shape, c.m): c for c in cells}
        grid = []
        for shape in shapes:
            row = [f"{shape.name} {shape.dims}"]
            for m in ms:
                c = by_key.get((shape, m))
                row.append("WRONG" if c and c.errors else fmt(c.ratio if c else None, 2))
            grid.append(row)
        lines += [f"## {mode}: {MODE_DESCRIPTIONS.get(mode, mode)}", "",
                  "det-suite time / torch._scaled_mm time:", "",
                  markdown_table(["shape (N x K)", *(f"M={m}" for m in ms)], grid)]
        probed = [c for c in cells if c.fp64_error]
        if probed:
            errors = [[f"{shape.name} {shape.dims}"] + [
                fmt_error(by_key.get((shape, m))) for m in ms] for shape in shapes]
            lines += ["", "Relative Frobenius error against an fp64 product of the same "
                          "quantized operands, det-suite / torch._scaled_mm (cuBLAS default "
                          "accumulation); the BF16 rounding of the exact product is the floor "
                          "of both (bench/gemm/fp64_error.py):", "",
                      markdown_table(["shape (N x K)", *(f"M={m}" for m in ms)], errors)]
        lines += ["", summarize(mode, cells).line()]
        if mode in run.launch_floor_us:
            lines += ["", f"An empty kernel takes {run.launch_floor_us[mode]:.2f} us per call "
                          "in this mode (launch and timing overhead every cell includes)."]
        details = [[c.shape.name, c.m, fmt(c.det_us), fmt(c.torch_us), fmt(c.ratio, 3),
                    fmt(c.floor_ratio, 2), config_text(c.config)] for c in cells]
        lines += ["", "<details><summary>cells</summary>", "",
                  markdown_table(["shape", "M", "det us", "torch us", "ratio", "floor x",
                                  "config"], details),
                  "", "</details>", ""]
    return "\n".join(lines)
