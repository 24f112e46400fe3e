"""`det-suite <command>`: each module in det_suite.commands registers one subcommand."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import det_suite.commands as commands_pkg
from det_suite.platform.interpreter import default_to_interpreter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det-suite",
        description="Deterministic FP8 inference: kernels, invariance checks, reports.")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{commands_pkg.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "needs_kernels", True):
        # Before the command imports a kernel: without a CUDA device the kernels can only
        # run on Triton's interpreter; say so rather than fail on first launch.
        default_to_interpreter(announce="det-suite: no CUDA device; kernels run on the "
                                        "Triton interpreter (TRITON_INTERPRET=1)")
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
