"""Every difference between the Triton versions det-suite supports, in one place.

det-suite runs on Triton 3.6 (the GPU runners' version), 3.7, 3.8 (the seed's SGLang stack)
and 3.9, on GPUs and on the CPU interpreter; `docs/runtime-matrix.md` records what each was
seen to do. Code elsewhere asks this module instead of comparing versions itself, so a new
Triton means one new row here and one test.

Differences handled:

- **Stage-inspection hook** (`knobs.runtime.add_stages_inspection_hook`), which the lint's
  compile workers use to stop Triton's pipeline at PTX. Through 3.6 Triton calls the hook
  once per compile with `(backend, stages, options, language, capability)`
  (`HOOK_STAGES_ONLY`). From 3.7 it is also called with no arguments, before compiling, and
  must return `(cache-key suffix, hash)` so a changed pipeline gets its own cache entry
  (`HOOK_KEYED`); a hook written for 3.6 fails there (Triton 3.9's "failed to compile:
  StopIteration").
- **numpy under the interpreter**: Triton 3.6's interpreter fails on numpy >= 2.3;
  later versions run on any numpy. `numpy_problem` names the mismatch.
"""

from __future__ import annotations

import hashlib
import re
from typing import Callable

# Oldest Triton det-suite runs on, and the versions it is tested on (tox envs cpu-triton3X).
MINIMUM = (3, 6)
TESTED = ((3, 6), (3, 7), (3, 8), (3, 9))

HOOK_STAGES_ONLY = "stages-only"
HOOK_KEYED = "keyed"
# First Triton that calls the stage hook with no arguments for a cache key.
_KEYED_HOOK_SINCE = (3, 7)

# Triton versions whose interpreter needs numpy below a ceiling (exclusive).
_NUMPY_CEILING = {(3, 6): (2, 3)}

# Cache-key suffix of the PTX-only pipeline: changing what `ptx_only_stage_hook` does must
# change this text, so no compile cached under the old pipeline is reused.
PTX_ONLY_PIPELINE = "det-suite-ptx-only-v1"


class UnsupportedTritonError(RuntimeError):
    """This Triton is older than det-suite supports."""


def parse_version(text: str) -> tuple[int, int]:
    """'3.6.0', '3.7.1+gitabc', '3.9.0.dev2026' -> (major, minor)."""
    match = re.match(r"\s*(\d+)\.(\d+)", str(text))
    if not match:
        raise ValueError(f"Triton version {text!r} is not of the form MAJOR.MINOR[.PATCH]")
    return int(match.group(1)), int(match.group(2))


def installed_version() -> tuple[int, int]:
    import triton

    return parse_version(triton.__version__)


def _label(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def support_status(version: tuple[int, int]) -> str:
    """'tested', 'untested' (newer than any tested: expected to work, reported as such) or
    'unsupported' (older than `MINIMUM`)."""
    if version < MINIMUM:
        return "unsupported"
    return "tested" if version in TESTED else "untested"


def unsupported_message(version: tuple[int, int]) -> str:
    tested = ", ".join(_label(v) for v in TESTED)
    return (f"Triton {_label(version)} is not supported by det-suite: it needs Triton "
            f"{_label(MINIMUM)} or newer (tested: {tested}). Install one, e.g. "
            f"`pip install triton=={_label(MINIMUM)}.0`.")


def require_supported(version: tuple[int, int] | None = None) -> tuple[int, int]:
    """Raise `UnsupportedTritonError` with one clear message on a Triton det-suite cannot
    run on; returns the version checked."""
    version = installed_version() if version is None else version
    if support_status(version) == "unsupported":
        raise UnsupportedTritonError(unsupported_message(version))
    return version


def stage_hook_protocol(version: tuple[int, int]) -> str:
    """How this Triton calls `knobs.runtime.add_stages_inspection_hook`."""
    return HOOK_KEYED if version >= _KEYED_HOOK_SINCE else HOOK_STAGES_ONLY


def _drop_cubin(stages: dict) -> None:
    # The lint reads PTX only; ptxas (the cubin stage) is ~40% of each compile.
    if "ptx" in stages and "cubin" in stages:
        stages["cubin"] = lambda module, metadata: b""


def ptx_only_stage_hook(protocol: str) -> Callable:
    """A stage hook that ends Triton's pipeline at PTX, for the given hook protocol."""
    if protocol == HOOK_STAGES_ONLY:
        def stages_only(backend, stages, options, language, capability):
            _drop_cubin(stages)

        return stages_only
    if protocol == HOOK_KEYED:
        digest = hashlib.sha256(PTX_ONLY_PIPELINE.encode()).hexdigest()

        def keyed(backend=None, stages=None, options=None, language=None, capability=None):
            if stages is None:  # asked for the pipeline's cache key before compiling
                return PTX_ONLY_PIPELINE, digest
            _drop_cubin(stages)
            return None

        return keyed
    raise ValueError(f"protocol {protocol!r} is not a stage-hook protocol; expected "
                     f"{HOOK_STAGES_ONLY!r} or {HOOK_KEYED!r}")


def numpy_problem(version: tuple[int, int], numpy_version: str) -> str | None:
    """Why this numpy cannot run under this Triton's interpreter, or None."""
    ceiling = _NUMPY_CEILING.get(version)
    if ceiling is None or parse_version(numpy_version) < ceiling:
        return None
    return (f"Triton {_label(version)}'s interpreter fails on numpy {numpy_version}: install "
            f"numpy<{_label(ceiling)} (or a Triton of {_label(_KEYED_HOOK_SINCE)} or newer)")
