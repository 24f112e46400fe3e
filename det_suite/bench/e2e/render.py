"""The e2e timing as people read it: Markdown in the seed's shape (prefix / batch rows, arm
times, ratio), the decode floor, the thermal record, every sample; and a plot of the
samples per cell and arm."""

from __future__ import annotations

import io

from det_suite.bench.e2e.arms import MODES, mode_kernels
from det_suite.bench.e2e.summary import GPU_CLAIM, METRIC_LABELS, METRICS
from det_suite.reports.tables import markdown_table

# metric -> (unit shown, factor from ms, decimals)
UNITS = {"e2e_ms": ("s", 1e-3, 4), "prefill_ms": ("ms", 1.0, 2),
         "decode_ms_per_step": ("ms", 1.0, 3)}


def _fmt(value, metric: str) -> str:
    if value is None:
        return "-"
    unit, factor, digits = UNITS[metric]
    return f"{value * factor:.{digits}f}"


def _ratio_text(ratio: dict) -> str:
    if ratio["ratio"] is None:
        return "-"
    low, high = ratio["ci95"]
    return f"{ratio['ratio']:.3f} [{low:.3f}, {high:.3f}]"


def metric_table(payload: dict, metric: str) -> str:
    arms = payload["plan"]["arms"]
    letters = payload["letters"]
    reference = arms[0]["name"]
    unit = UNITS[metric][0]
    header = ["Prefix / batch"]
    header += [f"{letters[a['name']]} {a['name']}, {unit} (boot medians; range)" for a in arms]
    header += [f"{a['name']} / {reference} [95% CI]" for a in arms[1:]]
    rows = []
    for cell in payload["cells"]:
        row = [f"{cell['prefix']} / {cell['batch']}"]
        for arm in arms:
            stats = cell["arms"].get(arm["name"], {}).get(metric)
            if not stats or stats["median"] is None:
                row.append("not run")
                continue
            boots = ", ".join(_fmt(v, metric) for v in stats["boot_medians"])
            low, high = stats["range"]
            row.append(f"{_fmt(stats['median'], metric)} ({boots}; "
                       f"{_fmt(low, metric)}-{_fmt(high, metric)})")
        for arm in arms[1:]:
            ratio = cell["ratios"].get(arm["name"], {}).get(metric)
            row.append(_ratio_text(ratio) if ratio else "-")
        rows.append(row)
    return markdown_table(header, rows)


def _protocol_lines(payload: dict) -> list[str]:
    plan, letters = payload["plan"], payload["letters"]
    arms = "; ".join(f"{letters[a['name']]} = {a['name']} ({_describe(a)})"
                     for a in plan["arms"])
    gate = payload["summary"]["thermal"]
    if plan["max_temp_c"] is None:
        gate_text = "thermal gate off"
    elif not payload["boots"]:
        gate_text = f"thermal gate at {plan['max_temp_c']:g} C: no boot finished"
    elif gate["available"]:
        gate_text = (f"thermal gate: idle until the GPU is at or under {plan['max_temp_c']:g} C "
                     f"before each sample (timeout {plan['gate_timeout_s']:g} s)")
    else:
        gate_text = ("thermal gate UNAVAILABLE (" + "; ".join(gate["unavailable_reasons"])
                     + "): no temperature was read or waited for")
    return [
        f"- {plan['output_tokens']} forced output tokens per request; {plan['warmup']} warm-up "
        f"+ {plan['samples']} samples per cell per boot; cache flushed before every request; "
        f"boot order {' '.join(plan['order'])} (each boot a fresh process).",
        f"- Arms: {arms}.",
        f"- {gate_text}.",
        "- Prefill: a max_new_tokens=1 request; end to end: the same batch with the forced "
        "output length; decode step = (end to end - prefill) / (output tokens - 1). "
        "Medians pool every measured sample of an arm; the interval is a two-level "
        "bootstrap over boots, then samples (det_suite/bench/e2e/stats.py).",
    ]


def _describe(arm: dict) -> str:
    stages = f", {arm['stages']} stages" if arm.get("stages") else ""
    return (f"{arm['mode']} mode, {'CUDA Graph' if arm['cuda_graph'] else 'eager'} decode"
            f"{stages}, {arm['backend']}")


def kernel_lines(payload: dict) -> list[str]:
    """What each arm runs, so a reader knows what "stock" means."""
    letters = payload["letters"]
    return [f"- {letters[a['name']]} = {a['name']}: " +
            (mode_kernels(a["mode"]) if a["mode"] in MODES else f"mode {a['mode']}")
            for a in payload["plan"]["arms"]]


# Why the control (arm A) can be slower than det in a cell, by metric: what was measured or
# known when the fast control was built (docs/e2e-and-report.md, "Where control is slower").
SLOWER_CAUSES = {
    "decode_ms_per_step": "at decode sizes (M = batch <= 16) both arms run det-suite's FP8 "
                          "GEMM, the faster kernel there, so the step differs by the decode "
                          "attention, the lm_head and log_softmax; above 16 rows the control "
                          "runs cuBLASLt",
    "prefill_ms": "both arms run det's prefill attention and row-local kernels, so prefill "
                  "differs by the FP8 GEMMs and the lm_head only",
    "e2e_ms": "end to end is prefill plus the decode steps: see those rows",
}


def slower_control_lines(payload: dict) -> list[str]:
    """Each cell and metric where arm A (the control) took longer than another arm."""
    arms = payload["plan"]["arms"]
    if len(arms) < 2:
        return []
    reference, lines = arms[0]["name"], []
    for metric in METRICS:
        for cell in payload["cells"]:
            for arm in arms[1:]:
                ratio = cell["ratios"].get(arm["name"], {}).get(metric) or {}
                if ratio.get("ratio") is not None and ratio["ratio"] < 1.0:
                    lines.append(f"- {METRIC_LABELS[metric]}, prefix {cell['prefix']} / "
                                 f"batch {cell['batch']}: {arm['name']} / {reference} = "
                                 f"{ratio['ratio']:.3f}; known cause: "
                                 f"{SLOWER_CAUSES[metric]}.")
    return lines or [f"None: {reference} is as fast as or faster than every other arm in "
                     "every cell."]


def _bytes(n: int) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e8 else f"{n / 1e6:.3f} MB"


def _floor_lines(floor: dict, control: str | None = None) -> list[str]:
    if not floor["measured"]:
        weight = (f"{_bytes(floor['weight_bytes'])} of weights per decode step; "
                  if floor.get("weight_bytes") else "")
        return [f"Not measured: {weight}{floor.get('reason') or 'no boot measured it'}."]
    lines = [f"Weights read per decode step: {_bytes(floor['weight_bytes'])}; device copy "
             f"bandwidth {floor['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s (bytes read + "
             f"written, median of {len(floor['bandwidth_per_boot'])} boots); floor = "
             f"{floor['floor_ms']:.3f} ms per step.", ""]
    rows = [[r["arm"], "graph" if r["cuda_graph"] else "eager", r["prefix"],
             f"{r['decode_ms_per_step']:.3f}", f"{r['floor_ratio']:.2f}"] for r in floor["rows"]]
    lines.append(markdown_table(["arm", "decode", "prefix", "step ms (batch 1)", "x floor"],
                                rows))
    return lines + _control_over_arm_lines(floor["rows"], control)


def _control_over_arm_lines(rows: list[dict], control: str | None) -> list[str]:
    """The control's floor ratio over each other arm's, per prefix and decode mode: how
    much further from the floor the control's step is (issue 39's bar: at most 1.15)."""
    base = {(r["cuda_graph"], r["prefix"]): r for r in rows if r["arm"] == control}
    out = [f"- {control} / {r['arm']} at prefix {r['prefix']} "
           f"({'graph' if r['cuda_graph'] else 'eager'}): "
           f"{base[(r['cuda_graph'], r['prefix'])]['floor_ratio'] / r['floor_ratio']:.3f}"
           for r in rows if r["arm"] != control and (r["cuda_graph"], r["prefix"]) in base]
    if not out:
        return []
    return ["", "The control's step over each arm's, both against the floor (1.000: as far "
                "from it; above 1: the control is further):"] + out


def _thermal_lines(thermal: dict) -> list[str]:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(thermal["statuses"].items())) or "none"
    lines = [f"Gate outcomes per sample: {counts}."]
    if thermal["peak_temp_c"] is not None:
        clock = thermal["sm_clock_mhz_range"]
        lines.append(f"Peak temperature {thermal['peak_temp_c']:g} C, peak power "
                     f"{thermal['peak_power_w'] or 0:.0f} W, SM clock "
                     f"{'-'.join(f'{c:.0f}' for c in clock) if clock else '?'} MHz; waited "
                     f"{thermal['waited_s_total']:.0f} s in total.")
    if thermal["statuses"].get("timeout"):
        lines.append(f"WARNING: {thermal['statuses']['timeout']} sample(s) started above the "
                     "limit after the gate timed out (flagged in the samples).")
    return lines


def sample_rows(payload: dict) -> list[list]:
    rows = []
    for boot in payload["boots"]:
        for s in boot["samples"]:
            reading = s["gate"]["reading"] or {}
            rows.append([boot["index"] + 1, boot["arm"]["name"], f"{s['prefix']} / {s['batch']}",
                         s["index"], "yes" if s["warmup"] else "", f"{s['prefill_ms']:.2f}",
                         f"{s['e2e_ms']:.2f}", f"{s['decode_ms_per_step']:.3f}",
                         s["gate"]["status"], reading.get("temp_c", "-"),
                         reading.get("power_w", "-"), reading.get("sm_clock_mhz", "-")])
    return rows


def render_markdown(payload: dict) -> str:
    env = payload.get("environment") or {}
    status = ("complete" if payload["complete"] else
              f"INCOMPLETE: {len(payload['boots'])} of {len(payload['plan']['order'])} boots")
    lines = [f"# End-to-end A/B timing: {payload['plan']['model']}", "",
             f"Machine: {env.get('machine', '?')}; torch {env.get('torch', '?')}, triton "
             f"{env.get('triton', '?')}; det-suite at {env.get('git_revision') or '?'}. "
             f"Run {status}.", ""]
    if not payload["speed_claim"]:
        lines += [f"**Not a speed claim**: {GPU_CLAIM}.", ""]
    lines += _protocol_lines(payload) + [""]
    lines += ["## Arms and their kernels", ""] + kernel_lines(payload) + [""]
    if any(s["decode_ms_per_step"] < 0 for b in payload["boots"] for s in b["samples"]):
        lines += ["Some decode steps are negative: a decode step is the difference of two "
                  "requests' times, and there the prefill request's noise exceeded it.", ""]
    for metric in METRICS:
        unit = UNITS[metric][0]
        lines += [f"## {METRIC_LABELS[metric].capitalize()} ({unit}, pooled median)", "",
                  metric_table(payload, metric), ""]
    lines += ["## Where control is slower", ""] + slower_control_lines(payload) + [""]
    lines += ["## Decode floor (batch 1)", ""] + _floor_lines(
        payload["summary"]["floor"], payload["plan"]["arms"][0]["name"])
    lines += ["", "## Thermal record", ""] + _thermal_lines(payload["summary"]["thermal"])
    if payload["gate"]["failures"]:
        lines += ["", "## Gates FAILED", ""] + [f"- {f}" for f in payload["gate"]["failures"]]
    elif payload["gate"]["checked"]:
        lines += ["", "Gates: " + "; ".join(payload["gate"]["checked"]) + ": all held."]
    identical = [f"{c['prefix']} / {c['batch']} {name}" for c in payload["cells"]
                 for name, a in c["arms"].items() if not a["outputs_identical"]]
    if payload["boots"]:
        lines += ["", "Generated tokens identical across every sample and boot of each arm: "
                  + ("yes." if not identical else "NO in " + ", ".join(identical) + ".")]
    lines += ["", "<details><summary>every sample</summary>", "",
              markdown_table(["boot", "arm", "prefix / batch", "sample", "warm-up",
                              "prefill ms", "e2e ms", "decode ms/step", "gate", "temp C",
                              "power W", "SM MHz"], sample_rows(payload)),
              "", "</details>", ""]
    return "\n".join(lines)


def render_plot(payload: dict) -> tuple[bytes | None, str]:
    """PNG of every measured sample per cell (columns) and metric (rows), one column of
    points per arm, coloured by boot, the pooled median as a bar; (None, why) without
    matplotlib or samples."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return None, f"plot skipped: matplotlib is not importable ({exc})"
    cells, arms = payload["cells"], [a["name"] for a in payload["plan"]["arms"]]
    if not payload["boots"] or not cells:
        return None, "plot skipped: no samples"
    fig, axes = plt.subplots(len(METRICS), len(cells), squeeze=False,
                             figsize=(2.2 + 2.4 * len(cells), 1.5 + 2.2 * len(METRICS)))
    colours = plt.get_cmap("tab10")
    for col, cell in enumerate(cells):
        for row, metric in enumerate(METRICS):
            ax = axes[row][col]
            unit, factor, _ = UNITS[metric]
            for x, arm in enumerate(arms):
                boots = [b for b in payload["boots"] if b["arm"]["name"] == arm]
                for j, boot in enumerate(boots):
                    values = [s[metric] * factor for s in boot["samples"]
                              if s["prefix"] == cell["prefix"] and s["batch"] == cell["batch"]
                              and not s["warmup"]]
                    offset = (j - (len(boots) - 1) / 2) * 0.12
                    ax.plot([x + offset] * len(values), values, "o", ms=3, alpha=0.8,
                            color=colours(boot["index"] % 10),
                            label=f"boot {boot['index'] + 1} ({arm})" if col == 0 and row == 0
                            else None)
                stats = cell["arms"].get(arm, {}).get(metric)
                if stats and stats["median"] is not None:
                    ax.hlines(stats["median"] * factor, x - 0.3, x + 0.3, color="black", lw=1.2)
            ax.set_xticks(range(len(arms)), labels=arms, fontsize=7)
            ax.set_xlim(-0.6, len(arms) - 0.4)
            ax.tick_params(axis="y", labelsize=7)
            if row == 0:
                ax.set_title(f"prefix {cell['prefix']} / batch {cell['batch']}", fontsize=8)
            if col == 0:
                ax.set_ylabel(f"{METRIC_LABELS[metric]} ({unit})", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(handles)), fontsize=7)
    fig.suptitle(f"{payload['plan']['model']}: samples per arm (bar: pooled median)"
                 + ("" if payload["speed_claim"] else " - interpreter, not a speed claim"),
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue(), ""
