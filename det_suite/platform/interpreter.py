"""The interpreter switch: the one place det-suite reads or sets TRITON_INTERPRET.

Triton decides between compiling a kernel and interpreting it when a module of jitted
functions is imported (`triton.jit` reads the variable then, for Triton's own `tl.cdiv` and
friends too), so the switch must be thrown before Triton is imported. The CLI throws it
before a command imports its kernels, the pytest plugin at its own import, `det-suite
invariance --device cpu` on request, and the library (`default_for_library`, called by
`det_suite.ops` before it imports Triton) when torch has no CUDA support at all; compile
workers and GPU subprocesses are given an environment without it. On the CPU,
`require_kernel_device` (the ops' device check) explains what to do when kernels cannot run.

Whenever det-suite finds the interpreter on (when this module is imported, or a kernel is
about to run) or turns it on, it makes the interpreter's numerics GPU-faithful for the rest
of the process (`platform.gpu_faithful_interpreter`). This module is the one place that
happens, so the library, the CLI and the test-suite all compute the same bits on the CPU.
"""

from __future__ import annotations

import os
import sys

INTERPRET_ENV = "TRITON_INTERPRET"
LIBRARY_ANNOUNCE = (f"det-suite: torch has no CUDA support here; det-suite's kernels run on "
                    f"Triton's interpreter ({INTERPRET_ENV}=1 set for this process; set "
                    f"{INTERPRET_ENV}=0 beforehand to keep det-suite from choosing it)")
_BEFORE_IMPORT = (f"set {INTERPRET_ENV}=1 in the environment before Python imports triton or "
                  f"det_suite (e.g. `{INTERPRET_ENV}=1 python app.py`)")


def interpreter_active() -> bool:
    return os.environ.get(INTERPRET_ENV, "0") not in ("", "0")


def interpreter_chosen() -> bool:
    """Whether the variable is set at all (even to 0): the user decided; det-suite doesn't."""
    return INTERPRET_ENV in os.environ


def use_interpreter(announce: str | None = None) -> None:
    """Run kernels imported from now on under Triton's interpreter, GPU-faithfully."""
    os.environ[INTERPRET_ENV] = "1"
    if announce:
        print(announce, file=sys.stderr)
    problem = interpreter_numpy_problem()
    if problem:
        print(f"det-suite: warning: {problem}", file=sys.stderr)
    make_gpu_faithful()


def make_gpu_faithful() -> None:
    """Install the GPU-faithful numerics for this process (idempotent)."""
    from det_suite.platform import gpu_faithful_interpreter

    gpu_faithful_interpreter.install()


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
        if interpreter_active():
            make_gpu_faithful()
        return False
    import torch

    if torch.cuda.is_available():
        return False
    _choose(announce)
    return True


def _choose(announce: str | None) -> None:
    use_interpreter(announce)
    from det_suite.platform import hardware

    hardware.current.cache_clear()  # the snapshot records whether the interpreter is on


def interpreter_for_cpu_run(announce: str | None = None) -> None:
    """A run asked to use the CPU (`--device cpu`) runs det-suite's kernels on the
    interpreter, even on a GPU machine and whatever TRITON_INTERPRET said: compiled kernels
    cannot take CPU tensors. Must happen before Triton is imported (its own jitted helpers
    are compiled-mode afterwards): ValueError saying so otherwise."""
    if interpreter_active():
        make_gpu_faithful()
        return
    if triton_imported():
        raise ValueError(f"--device cpu needs {INTERPRET_ENV}=1 set before Triton is imported; "
                         "set it in the environment")
    _choose(announce)


def torch_without_cuda() -> bool:
    """torch was built without CUDA (and ROCm): no tensor can ever be on a GPU here, so
    kernels can only run on the interpreter. Asks the build, never the driver, so importing
    det-suite initialises nothing on a GPU machine."""
    import torch

    return torch.version.cuda is None and getattr(torch.version, "hip", None) is None


def triton_imported() -> bool:
    return "triton.language" in sys.modules


def default_for_library() -> bool:
    """For `det_suite.ops`, before it imports Triton: on a torch without CUDA, where the
    user left the choice open, choose the interpreter (announced once on stderr). Returns
    whether it was set here. Too late once Triton is imported (its own jitted helpers are
    then compiled-mode); `require_kernel_device` explains that case at the first launch."""
    if interpreter_chosen() or triton_imported() or not torch_without_cuda():
        return False
    _choose(LIBRARY_ANNOUNCE)
    return True


def require_kernel_device(name: str, device) -> None:
    """Before a launch on tensors of `device` (the ops' argument `name`): nothing to do on a
    CUDA or meta device; under the interpreter, make sure it is GPU-faithful; otherwise
    raise ValueError naming the argument and saying how to run det-suite's kernels here."""
    kind = getattr(device, "type", str(device))
    if kind in ("cuda", "meta"):
        return
    if interpreter_active():
        make_gpu_faithful()
        return
    where = f"{name} is on {device}; det-suite's kernels run on a CUDA device"
    if interpreter_chosen():
        raise ValueError(f"{where}, or on the CPU under Triton's interpreter, which "
                         f"{INTERPRET_ENV}={os.environ[INTERPRET_ENV]!r} turns off: "
                         + _BEFORE_IMPORT)
    if torch_without_cuda():
        raise ValueError(f"{where}, and this torch has no CUDA support, so only on the CPU "
                         "under Triton's interpreter; Triton was imported before det-suite "
                         "could choose it: " + _BEFORE_IMPORT)
    import torch

    if torch.cuda.is_available():
        raise ValueError(f"{where} (this machine has one: move the tensors there, e.g. "
                         ".cuda()), or on the CPU under Triton's interpreter: " + _BEFORE_IMPORT)
    raise ValueError(f"{where}, and this machine has none, so only on the CPU under Triton's "
                     "interpreter: " + _BEFORE_IMPORT)


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


def _gpu_faithful_at_import() -> None:
    # The user set the variable before det-suite was imported: kernels will be interpreted,
    # so the numerics must be the GPU's from the first launch. A Triton whose interpreter
    # cannot be patched must not break `import det_suite`; require_kernel_device raises the
    # reason at the first launch instead.
    if interpreter_active():
        try:
            make_gpu_faithful()
        except Exception:  # noqa: BLE001 - see above
            pass


_gpu_faithful_at_import()
