"""`det-suite bench e2e` as a library call: `bench_e2e(E2ESettings)` -> `E2EResult`.

The output folder holds `plan.json` (what the run measures), `boots/boot-NN-L-ARM.json`
(one per finished boot, written whole by the boot's process), and the aggregate:
`e2e.json` (every sample, statistics, environment), `e2e.md` and `e2e_samples.png`.
A folder that already holds a run is refused unless `resume` (keep the finished boots of
the same plan, run the rest) or `force` (delete this command's files, start over).
Ctrl-C ends the running boot's process, keeps the finished boots and writes the aggregate
of what finished, marked incomplete.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from det_suite.bench.e2e.arms import E2ESettings, arm_letters
from det_suite.bench.e2e.processes import BOOT_SCHEMA, BootFailed, subprocess_boot
from det_suite.bench.e2e.render import render_markdown, render_plot
from det_suite.bench.e2e.summary import gate_failures, summarize

SCHEMA = "det-suite/e2e/1"
PLAN_SCHEMA = "det-suite/e2e-plan/1"
PLAN_NAME, BOOTS_DIR = "plan.json", "boots"
JSON_NAME, MARKDOWN_NAME, PLOT_NAME = "e2e.json", "e2e.md", "e2e_samples.png"
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_GATE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class E2EUsageError(ValueError):
    """Settings that cannot run here; raised before any boot starts."""


@dataclass
class E2EResult:
    payload: dict
    paths: dict[str, str]
    exit_code: int
    notes: list[str] = field(default_factory=list)


def boot_path(out: Path, index: int, letter: str, arm: str) -> Path:
    return out / BOOTS_DIR / f"boot-{index + 1:02d}-{letter}-{arm}.json"


def _device(settings: E2ESettings) -> str:
    import torch

    return settings.device or ("cuda" if torch.cuda.is_available() else "cpu")


def _nvml_problem() -> str | None:
    """Why NVML cannot read a GPU here, or None. Asked without touching CUDA: this process
    only starts boots, each of which gets a fresh CUDA context of its own."""
    try:
        import pynvml
    except ImportError as exc:
        return f"nvidia-ml-py is not installed (pip install 'det-suite[nvml]'): {exc}"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        return f"NVML did not initialise: {exc}"
    return None if count else "NVML sees no GPU"


def preflight(settings: E2ESettings) -> list[str]:
    """Refuse what cannot be honoured here; returns notes for what is only degraded."""
    import torch

    from det_suite.platform.interpreter import interpreter_active

    device = torch.device(_device(settings))
    gpu = device.type == "cuda" and torch.cuda.is_available() and not interpreter_active()
    for arm in settings.arms:
        if arm.cuda_graph and device.type != "cuda":
            raise E2EUsageError(f"arm {arm.name}: graph=on needs a CUDA device; this run is "
                                f"on {device} (use graph=off)")
        if arm.backend != "embedded":
            raise E2EUsageError(f"arm {arm.name}: backend {arm.backend!r} is not wired into "
                                "bench e2e yet; only 'embedded' boots")
    from det_suite.models.spec import ModelSpec, is_synthetic

    if is_synthetic(settings.model):   # a folder or hub id is checked where it loads
        try:
            ModelSpec.parse(settings.model)
        except ValueError as exc:
            raise E2EUsageError(f"model: {exc}") from None
    if not gpu and (settings.max_ratio is not None or settings.max_decode_floor_ratio
                    is not None):
        raise E2EUsageError("--max-ratio / --max-decode-floor-ratio judge speed, which needs "
                            "a CUDA GPU with compiled kernels (not the Triton interpreter)")
    notes = []
    if not gpu:
        notes.append(f"device {device}{' (Triton interpreter)' if interpreter_active() else ''}"
                     ": timings show the protocol runs, they are not speed claims; the thermal "
                     "gate and the decode floor are reported unavailable")
    elif settings.max_temp_c is not None:
        problem = _nvml_problem()
        if problem:
            raise E2EUsageError(f"thermal gate (--max-temp {settings.max_temp_c:g}): "
                                f"{problem}; install nvidia-ml-py or pass --max-temp off")
    return notes


def _our_files(out: Path) -> list[Path]:
    files = [out / n for n in (PLAN_NAME, JSON_NAME, MARKDOWN_NAME, PLOT_NAME)]
    files += sorted((out / BOOTS_DIR).glob("boot-*.json")) if (out / BOOTS_DIR).is_dir() else []
    return [f for f in files if f.exists()]


def prepare_out(settings: E2ESettings) -> Path:
    """Create, resume or (with force) clear the output folder; write plan.json."""
    from det_suite.reports.files import write_json_atomic

    out = Path(settings.out)
    existing = _our_files(out)
    plan = settings.plan()
    if existing and settings.force:
        for path in existing:
            path.unlink()
    elif existing and settings.resume:
        try:
            old = json.loads((out / PLAN_NAME).read_text())["plan"]
        except (OSError, ValueError, KeyError):
            raise E2EUsageError(f"resume: {out / PLAN_NAME} is missing or unreadable; cannot "
                                "tell what the finished boots measured (use --force)") from None
        differ = sorted(k for k in set(old) | set(plan) if old.get(k) != plan.get(k))
        if differ:
            raise E2EUsageError(f"resume: {out} holds a run with other settings ("
                                f"{', '.join(differ)} differ); use the same settings or --force")
    elif existing:
        raise E2EUsageError(f"{out} already holds an e2e run ({existing[0].name}); pass "
                            "--resume to finish it or --force to overwrite it")
    (out / BOOTS_DIR).mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / PLAN_NAME, {"schema": PLAN_SCHEMA, "plan": plan})
    return out


def _load_boot(path: Path, index: int, arm: dict) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = (record.get("schema") == BOOT_SCHEMA and record.get("index") == index
          and record.get("arm") == arm)
    return record if ok else None


class _Progress:
    """A tqdm bar over every sample of every boot (plain lines without tqdm)."""

    def __init__(self, total: int, enabled: bool, say: Callable[[str], None]) -> None:
        self.say, self.bar = say, None
        if enabled:
            try:
                from det_suite.platform.progress import progress_bar
                self.bar = progress_bar(total=total, unit="sample", file=sys.stderr)
            except ImportError:
                pass

    def event(self, boot_label: str, event: dict) -> None:
        if event.get("event") != "sample":
            return
        text = (f"{boot_label} prefix {event['prefix']} batch {event['batch']} "
                f"{'warm-up' if event['warmup'] else 'sample'} {event['index']}: "
                f"{event['e2e_ms']:.1f} ms (gate {event['gate']})")
        if self.bar is not None:
            self.bar.set_description(boot_label)
            self.bar.update(1)
        else:
            self.say(text)

    def skip(self, count: int) -> None:
        if self.bar is not None:
            self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def bench_e2e(settings: E2ESettings, *, boot_runner=None, bar: bool = False) -> E2EResult:
    """Run (or resume) the A/B boots and write the aggregate. `boot_runner(job, out_path,
    on_event)` runs one boot and writes its record (default: a child process)."""
    say = settings.progress or (lambda _line: None)
    notes = preflight(settings)
    for note in notes:
        say(f"note: {note}")
    out = prepare_out(settings)
    plan = {**settings.plan(), "device": _device(settings)}
    letters = arm_letters(len(settings.arms))
    runner = boot_runner or (lambda job, path, on_event: subprocess_boot(
        job, path, on_event, timeout_s=settings.boot_timeout_s))
    per_boot = len(settings.cells) * (settings.warmup + settings.samples)
    progress = _Progress(per_boot * len(settings.boot_arms), bar, say)
    boots, failure, interrupted = [], None, False
    try:
        for index, arm_index in enumerate(settings.boot_arms):
            arm, letter = settings.arms[arm_index], letters[arm_index]
            path = boot_path(out, index, letter, arm.name)
            label = f"boot {index + 1}/{len(settings.boot_arms)} {letter} {arm.name}"
            record = _load_boot(path, index, arm.as_dict()) if path.exists() else None
            if record is not None:
                say(f"{label}: finished earlier, kept ({path.name})")
                progress.skip(per_boot)
                boots.append(record)
                continue
            say(f"{label}: starting a fresh process ({arm.describe()})")
            job = {"index": index, "letter": letter, "arm": arm.as_dict(), "plan": plan,
                   "gate_poll_s": settings.gate_poll_s}
            runner(job, path, lambda event, label=label: progress.event(label, event))
            record = _load_boot(path, index, arm.as_dict())
            if record is None:
                raise BootFailed(f"{label}: its record {path} is missing or does not match")
            boots.append(record)
            say(f"{label}: done in {record['run_s']:.1f} s")
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: the running boot was stopped; finished boots are kept")
    except BootFailed as exc:
        failure = str(exc)
        say(f"FAILED: {failure}")
    finally:
        progress.close()
    return finish(settings, plan, boots, out, notes=notes, failure=failure,
                  interrupted=interrupted)


def _headline(payload: dict) -> list[str]:
    lines = []
    reference = payload["summary"]["reference"]
    for arm in payload["plan"]["arms"][1:]:
        ratios = [(c["ratios"][arm["name"]]["e2e_ms"]["ratio"], c) for c in payload["cells"]
                  if arm["name"] in c["ratios"]
                  and c["ratios"][arm["name"]]["e2e_ms"]["ratio"] is not None]
        if ratios:
            worst, cell = max(ratios, key=lambda rc: rc[0])
            lines.append(f"{arm['name']} / {reference} end to end: "
                         f"{min(r for r, _ in ratios):.3f} to {worst:.3f} over {len(ratios)} "
                         f"cells (worst at prefix {cell['prefix']} batch {cell['batch']})")
    for row in payload["summary"]["floor"]["rows"]:
        lines.append(f"{row['arm']} batch-1 decode step at prefix {row['prefix']}: "
                     f"{row['decode_ms_per_step']:.3f} ms = {row['floor_ratio']:.2f}x the "
                     "weight-read floor")
    if not payload["speed_claim"]:
        lines.append("not a speed claim: timed on the Triton interpreter / without a GPU")
    if not payload["complete"]:
        lines.append(f"INCOMPLETE: {len(payload['boots'])} of {len(payload['plan']['order'])} "
                     "boots finished")
    return lines


def finish(settings: E2ESettings, plan: dict, boots: list[dict], out: Path, *,
           notes: list[str], failure: str | None, interrupted: bool) -> E2EResult:
    """Aggregate the finished boots and write e2e.json, e2e.md and the plot."""
    from det_suite.reports.environment import environment
    from det_suite.reports.files import write_bytes_atomic, write_json_atomic, write_text_atomic

    summary = summarize(plan, boots, seed=settings.seed)
    complete = len(boots) == len(settings.boot_arms)
    checked = [f"{n} <= {v:g}" for n, v in (("end-to-end ratio", settings.max_ratio),
                                             ("batch-1 graph decode / floor",
                                              settings.max_decode_floor_ratio)) if v is not None]
    failures = gate_failures(summary, max_ratio=settings.max_ratio,
                             max_decode_floor_ratio=settings.max_decode_floor_ratio)
    if not complete:
        failures = []      # an unfinished run is not judged
    code = (EXIT_INTERRUPTED if interrupted else EXIT_ERROR if failure else
            EXIT_GATE if failures else EXIT_OK)
    speed = bool(boots) and all(b["device"].startswith("cuda")
                                and not b["environment"].get("triton_interpret")
                                for b in boots)
    letters = arm_letters(len(settings.arms))
    payload = {
        "schema": SCHEMA, "kind": "e2e", "ok": code == EXIT_OK, "exit_code": code,
        "complete": complete, "interrupted": interrupted, "failure": failure,
        "speed_claim": speed, "notes": notes,
        "environment": environment(),
        "packages": boots[0]["packages"] if boots else None,
        "gpu": boots[0]["gpu"] if boots else None,
        "plan": plan,
        "letters": {a.name: letters[i] for i, a in enumerate(settings.arms)},
        "cells": list(summary["cells"].values()),
        "summary": {k: v for k, v in summary.items() if k != "cells"},
        "gate": {"checked": checked, "failures": failures},
        "files": {"boots": [str(boot_path(out, b["index"], b["letter"], b["arm"]["name"])
                                .relative_to(out)) for b in boots]},
        "boots": boots,
    }
    payload["headline"] = _headline(payload)
    paths = {"json": str(write_json_atomic(out / JSON_NAME, payload)),
             "markdown": str(write_text_atomic(out / MARKDOWN_NAME, render_markdown(payload)))}
    png, why = render_plot(payload)
    if png is None:
        notes.append(why)
    else:
        paths["plot"] = str(write_bytes_atomic(out / PLOT_NAME, png))
    return E2EResult(payload=payload, paths=paths, exit_code=code, notes=notes)

