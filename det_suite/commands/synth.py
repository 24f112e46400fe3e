"""`det-suite synth`: write a synthetic Qwen3 ModelOpt FP8 checkpoint (det_suite.models.synthetic).

Random weights scaled like a trained model's, static input scales calibrated from a short
forward pass (amax / 448), the real file layout (config.json, hf_quant_config.json,
safetensors with an index when sharded) and a self-contained tokenizer with a chat
template, so every model-level check runs offline. Same seed, same bytes, on any machine.
"""

from __future__ import annotations


# Building on a CPU peaks near 4 bytes per parameter (the float32 copy calibration runs on):
# qwen3-4b (4.0e9 parameters) measured 15.8 GB and 6 minutes on a 2-core CPU (issue 38).
CPU_BYTES_PER_PARAMETER = 4
CPU_SECONDS_PER_PARAMETER_CORE = 6 * 60 * 2 / 4.0e9
# Above this estimate a preset is GPU-sized: a CPU build needs --allow-cpu.
CPU_LIMIT_BYTES = 2 * 2 ** 30


def register(subparsers) -> None:
    from det_suite.models.synthetic import PRESETS

    parser = subparsers.add_parser(
        "synth", help="write a synthetic Qwen3 FP8 checkpoint (offline model checks)",
        description=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS),
                        help="model shapes: tiny, tiny-wide, tiny-tied (CPU tests) or a published "
                             "Qwen3's (qwen3-4b: tied embeddings; qwen3-8b, qwen3-14b, "
                             "qwen3-32b)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="folder to write (replaced whole when the build finishes)")
    parser.add_argument("--device", default=None,
                        help="where to build the weights (default: cuda when available, "
                             "else cpu); the bytes written are the same either way")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="build a GPU-sized preset (qwen3-*) on the CPU anyway")
    parser.set_defaults(handler=run, needs_kernels=False)


def cpu_estimate(preset_name: str) -> tuple[int, float]:
    """(peak bytes, seconds) to build `preset_name` on this machine's CPU; an estimate from
    the parameter count and one measured build."""
    import os

    from det_suite.models.synthetic import preset

    parameters = preset(preset_name).parameters()
    cores = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count() or 1)
    return (parameters * CPU_BYTES_PER_PARAMETER,
            parameters * CPU_SECONDS_PER_PARAMETER_CORE / cores)


def _out_folder(text: str):
    """--out as a Path; an existing folder is replaced only when it is empty or a checkpoint
    (holds config.json), so a mistyped --out never deletes someone's files."""
    from pathlib import Path

    from det_suite.errors import InputError

    out = Path(text)
    if out.exists() and (not out.is_dir() or (any(out.iterdir())
                                              and not (out / "config.json").exists())):
        raise InputError(f"--out {out}: exists and is not a checkpoint folder; expected a new "
                         "or empty folder, or an earlier synth output to replace")
    return out


def run(args) -> int:
    import shutil
    import time

    import torch

    from det_suite.errors import InputError
    from det_suite.models.synthetic import write_synthetic
    from det_suite.reports.run_folder import new_run_id

    if args.seed < 0:
        raise InputError(f"--seed must be non-negative, got {args.seed}")
    out = _out_folder(args.out)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        peak, seconds = cpu_estimate(args.preset)
        if peak > CPU_LIMIT_BYTES and not args.allow_cpu:
            raise InputError(
                f"--preset {args.preset} is GPU-sized: building it on the CPU needs about "
                f"{peak / 1e9:.0f} GB of memory and {seconds / 60:.0f} min here; pass "
                "--allow-cpu to build it anyway, or run on a GPU")
    start = time.perf_counter()

    def say(line: str) -> None:
        print(f"det-suite synth: {line} [{time.perf_counter() - start:.0f} s]", flush=True)

    # Built in a hidden folder beside --out and renamed at the end: an interrupted build
    # leaves nothing that looks like a checkpoint.
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.partial-{new_run_id()}")
    try:
        write_synthetic(args.preset, args.seed, staging, device=device, progress=say)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"det-suite synth: wrote synthetic:{args.preset}?seed={args.seed} to {out} "
          f"({time.perf_counter() - start:.1f} s on {device})")
    return 0
