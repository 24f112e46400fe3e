"""What the kernel sweep tools (`tools/*_sweep.py`) share: loading a sibling tool, the CPU
switch they read before Triton is imported, their `--device` and integer-list options, and
how a sweep ends (its JSON and Markdown written atomically, a verdict from its bit checks and
positive control).

A sweep compares candidate launches of a kernel with the shipped one bit for bit and times
them on a GPU; on a CPU (`--device cpu`) it runs the same comparison under Triton's
interpreter, which the unit tests use. Imports nothing heavy: a tool calls `cpu_requested`
before torch or Triton is imported.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path


def load_tool(path: Path):
    """The tool script at `path` as a module (tools/ is no package): registered in
    sys.modules under its file name first, as its dataclasses need."""
    spec = importlib.util.spec_from_file_location(f"det_suite_tool_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def cpu_requested(argv) -> bool:
    """Whether the command line asks for `--device cpu` (either spelling)."""
    return "--device=cpu" in argv or any(a == "--device" and b == "cpu"
                                         for a, b in zip(argv, argv[1:]))


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """`--device cuda|cpu` (default cuda): where a sweep runs; cpu is Triton's interpreter,
    which `cpu_requested` switches on before Triton is imported."""
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")


STEP_MODELS = {"cuda": "synthetic:qwen3-8b?seed=0", "cpu": "synthetic:tiny-wide?seed=0"}


def add_step_options(parser: argparse.ArgumentParser, arms) -> None:
    """The options of a sweep over whole decode steps of the embedded engine: --model (by
    device, STEP_MODELS), --prefix, --tokens, --arms (default: all of `arms`), --device."""
    parser.add_argument("--model", default=None,
                        help=f"default {STEP_MODELS['cuda']} (GPU), {STEP_MODELS['cpu']} (CPU)")
    parser.add_argument("--prefix", type=int_list, default=[128, 2048],
                        help="cached tokens of the timed decode steps")
    parser.add_argument("--tokens", type=int, default=32,
                        help="decode steps per timed generation")
    parser.add_argument("--arms", default=",".join(arms))
    add_device_option(parser)


def parse_step_args(argv, description: str, known, control: str) -> argparse.Namespace:
    """A step sweep's command line: OUT_DIR and `add_step_options`, with .arms as run
    (`chosen_arms`), .gpu (`wants_gpu`) and .model (the device's STEP_MODELS by default)."""
    from pathlib import Path

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out_dir", type=Path)
    add_step_options(parser, known)
    args = parser.parse_args(argv)
    args.arms = chosen_arms(parser, args.arms, known, control)
    args.gpu = wants_gpu(parser, args)
    args.model = args.model or STEP_MODELS[args.device]
    return args


def chosen_arms(parser: argparse.ArgumentParser, text: str, known, control: str) -> list[str]:
    """--arms as run: "shipped" first and `control` last, each once; an unknown name is
    refused through the parser (exit 2) with the names it knows."""
    arms = list(dict.fromkeys(["shipped", *text.split(","), control]))
    unknown = [a for a in arms if a not in known]
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    return arms


def step_columns(cell: dict, base: dict) -> str:
    """A step sweep's timing columns for one cell, Markdown: prefix | replay ms | step ms |
    replay / the shipped arm's at that prefix (`base`: prefix -> the shipped cell); an
    untimed cell (no "replay_ms") reads "- | not timed | not timed | -"."""
    if "replay_ms" not in cell:
        return "- | not timed | not timed | -"
    ratio = cell["replay_ms"] / base[cell["prefix"]]["replay_ms"]
    return (f"{cell['prefix']} | {cell['replay_ms']:.3f} | {cell['step_ms']:.3f} | "
            f"{ratio:.3f}")


def wants_gpu(parser: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Whether the sweep runs on the GPU (`--device cuda`); refused through the parser (exit
    2, the option named) where torch sees no CUDA device."""
    import torch

    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (use --device cpu for the bit check)")
    return gpu


def int_list(text: str) -> list[int]:
    """An argparse type: comma-separated integers, each >= 1."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers; got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1; got {text!r}")
    return values


def same_bits(row: dict) -> str:
    """A Markdown cell for one arm's bit check: `equal` and `differing_elements`."""
    return "yes" if row["equal"] else f"NO ({row['differing_elements']} elements)"


def control_verdict(control: str, flagged: bool) -> str:
    """The line under a sweep's table that says whether its positive control differed."""
    return f"Control arm `{control}` must differ: " + (
        "it did in every cell." if flagged else
        "**it did not in some cell: the comparison is not to be trusted.**")


def finish(out_dir: Path, stem: str, payload: dict, markdown: str, *,
           candidates: str) -> int:
    """Write OUT_DIR/<stem>.json and .md atomically and return the exit status: 0 when the
    payload's control was flagged (`control_flagged`) and its candidates kept the bits
    (`candidates_equal`), else 1 with what failed; `candidates` names them in the message."""
    from det_suite.reports.files import write_json_atomic, write_text_atomic

    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / f"{stem}.json", payload)
    write_text_atomic(out_dir / f"{stem}.md", markdown)
    print(f"wrote {out_dir / f'{stem}.json'} and {stem}.md")
    failures = []
    if not payload["control_flagged"]:
        failures.append("the control was not flagged: the comparison is not to be trusted")
    if not payload["candidates_equal"]:
        failures.append(f"{candidates} changed the bits")
    if failures:
        print("FAILED: " + "; ".join(failures))
    return 1 if failures else 0
