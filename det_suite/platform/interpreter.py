"""The interpreter switch: the one place det-suite reads or sets TRITON_INTERPRET.

Triton decides between compiling a kernel and interpreting it when the kernel's module is
imported (`triton.jit` reads the variable then), so the switch must be thrown before any
module of `det_suite.kernels` is imported. The CLI throws it before it imports a command's
kernels, the pytest plugin at its own import, `det-suite invariance --device cpu` on
request; compile workers and GPU subprocesses are given an environment without it.
"""

from __future__ import annotations

import os
import sys

INTERPRET_ENV = "TRITON_INTERPRET"


def interpreter_active() -> bool:
    return os.environ.get(INTERPRET_ENV, "0") not in ("", "0")


def interpreter_chosen() -> bool:
    """Whether the variable is set at all (even to 0): the user decided; det-suite doesn't."""
    return INTERPRET_ENV in os.environ


def use_interpreter(announce: str | None = None) -> None:
    """Run kernels imported from now on under Triton's interpreter."""
    os.environ[INTERPRET_ENV] = "1"
    if announce:
        print(announce, file=sys.stderr)
    problem = interpreter_numpy_problem()
    if problem:
        print(f"det-suite: warning: {problem}", file=sys.stderr)


def interpreter_numpy_problem() -> str | None:
    """Why the installed numpy breaks the installed Triton's interpreter, or None: said once
    up front, because the interpreter's own failure names neither package."""
    import numpy

    from det_suite.platform import triton_compat

    try:
        version = triton_compat.installed_version()
    except Exception:  # noqa: BLE001 - no Triton at all is reported where a kernel is used
        return None
    return triton_compat.numpy_problem(version, numpy.__version__)


def default_to_interpreter(*, announce: str | None = None) -> bool:
    """Without a CUDA device the kernels can only run on the interpreter: choose it unless
    the user already chose. Returns whether it was set here."""
    if interpreter_chosen():
        return False
    import torch

    if torch.cuda.is_available():
        return False
    use_interpreter(announce)
    from det_suite.platform import hardware

    hardware.current.cache_clear()  # the snapshot records whether the interpreter is on
    return True


def leave_interpreter() -> None:
    """For a process that must compile real kernels (the lint's compile worker), before
    any kernel module is imported."""
    os.environ.pop(INTERPRET_ENV, None)


def environment_without_interpreter(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of `env` (default: this process's) for a subprocess that must compile kernels
    for the GPU, never fall back to the interpreter."""
    out = dict(os.environ if env is None else env)
    out.pop(INTERPRET_ENV, None)
    return out
