"""`det-suite <command>`: each module in det_suite.commands registers one subcommand.

`main` owns the exit-code contract (det_suite.errors): a command returns 0, 1 or 3 itself;
bad input (InputError, an OSError reading or writing a file) is one line and exit 2, Ctrl-C
one line and exit 130, anything else a det-suite bug: exit 4 with the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import traceback

import det_suite.commands as commands_pkg
from det_suite.errors import (BUG_LINE, EXIT_BUG, EXIT_INPUT, EXIT_INTERRUPTED, InputError)
from det_suite.platform.interpreter import default_to_interpreter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det-suite",
        description="Deterministic FP8 inference: kernels, invariance checks, reports.")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback for input errors and interrupts")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{commands_pkg.__name__}.{info.name}")
        module.register(sub)
    return parser


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return (f"{exc.filename}: {exc.strerror.lower()} (expected a path this command can "
                "read or write)")
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    try:  # building the parser imports every command: a Ctrl-C there is one line too
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("\ndet-suite: interrupted (Ctrl-C) before the command started", file=sys.stderr)
        return EXIT_INTERRUPTED
    sub = getattr(args, "gsm8k_command", None) or getattr(args, "bench_command", None)
    name = f"det-suite {args.command}" + (f" {sub}" if sub else "")
    try:
        if getattr(args, "needs_kernels", True):
            # Before the command imports a kernel: without a CUDA device the kernels can only
            # run on Triton's interpreter; say so rather than fail on first launch.
            default_to_interpreter(announce="det-suite: no CUDA device; kernels run on the "
                                            "Triton interpreter (TRITON_INTERPRET=1)")
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        if args.debug:
            traceback.print_exc()
        print(f"\n{name}: interrupted (Ctrl-C); nothing half-written was kept",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except (InputError, OSError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"{name}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_INPUT
    except Exception:
        traceback.print_exc()
        print(f"{name}: internal error (exit {EXIT_BUG}): {BUG_LINE}", file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
