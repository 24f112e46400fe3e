"""det-suite's markers and what each needs of the machine.

Markers are registered (so ``--strict-markers`` holds) and skip a test whose needs this
machine doesn't meet, with a reason naming what is needed and what was found. Each skip
also records a `NOT_RUN_PROPERTY` user property (it reaches junit XML and survives xdist):
a skipped GPU test is not run, never passed.

In diagnosis mode (``--det-arch-as=FAMILY`` or DET_SUITE_ARCH) FAMILY's arch-marked tests
run on whatever GPU is present, tests marked for another family skip (they would test
FAMILY's table, not theirs), and every GPU test that runs under a table foreign to the GPU
gets the user property `DIAGNOSTIC_PROPERTY`.

An arch marker written ``@pytest.mark.sm120(hardware=False)`` selects without requiring:
``-m sm120`` picks the test (it belongs to what must pass for SM12x: a CPU lint of the
sm_120 target, a family-agnostic GPU test), but it needs no SM12x hardware, so it runs
wherever its other markers allow and ``--det-require=sm120`` does not count it
(`needs`). `det_suite.pytest_plugin.families` adds such marks at collection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from det_suite.platform import family as arch, hardware
from det_suite.platform.interpreter import INTERPRET_ENV

if TYPE_CHECKING:
    from det_suite.pytest_plugin.settings import Settings

MARKERS = {
    "gpu": "needs a CUDA GPU, with kernels compiled for it (not the Triton interpreter)",
    "fp8": "needs a GPU with FP8 MMA (compute capability >= 8.9)",
    "sm90": "needs an SM90 GPU (compute capability 9.0); arch-specific assertions",
    "sm120": "needs an SM12x GPU (compute capability 12.x); arch-specific assertions",
    "graph": "needs CUDA Graphs (a CUDA GPU, not the Triton interpreter)",
    "model": "needs transformers and safetensors (pip install 'det-suite[model]')",
    "sglang": "needs sglang (pip install 'det-suite[sglang]'; on a CPU: tox -e sglang-cpu)",
    "slow": "slow; skipped unless --run-slow, run automatically when a GPU is present",
    "perf": "timing; skipped unless --run-perf and a GPU is present",
}
# Markers that select and need nothing of the machine. `meta`: a test that fails on any
# edit to certain text whatever the code computes (the README block's staleness, every
# mutant still applying), so `tools/mutate.py` deselects it: its failure is not a kill.
SELECTION_MARKERS = {
    "meta": "fails on an edit to certain text whatever the code computes; tools/mutate.py "
            "deselects it (a meta-test failing is not a mutant killed)",
}
# Markers whose tests execute kernels on the GPU: what diagnosis mode must label.
GPU_MARKERS = ("gpu", "fp8", "sm90", "sm120", "graph", "perf")
# Arch markers are named after the family whose hardware they need.
ARCH_MARKERS = ("sm90", "sm120")

# User properties a test gets at collection: 'marker: reason' per unmet marker (the test
# is skipped), or the forced tile family of a GPU test run under a foreign table.
NOT_RUN_PROPERTY = "det_suite_not_run"
DIAGNOSTIC_PROPERTY = "diagnostic_arch_as"


# The one keyword an arch marker takes: hardware=False makes it select without requiring.
HARDWARE_KEYWORD = "hardware"


def _mark_needs_hardware(item, mark) -> bool:
    """Whether one `mark` makes its marker a requirement; bad arguments are a usage error
    naming the test, the marker and what is expected."""
    extra = sorted(set(mark.kwargs) - {HARDWARE_KEYWORD})
    flag = mark.kwargs.get(HARDWARE_KEYWORD, True)
    if mark.name not in ARCH_MARKERS and HARDWARE_KEYWORD in mark.kwargs:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.{mark.name}({HARDWARE_KEYWORD}=...): only the arch "
            f"markers ({', '.join(ARCH_MARKERS)}) take {HARDWARE_KEYWORD}=")
    if mark.name in ARCH_MARKERS and (mark.args or extra or not isinstance(flag, bool)):
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.{mark.name} takes only {HARDWARE_KEYWORD}=True or "
            f"{HARDWARE_KEYWORD}=False; got args={mark.args!r}, kwargs={mark.kwargs!r}")
    return flag


def needs(item, marker: str) -> bool:
    """Whether `item` needs what `marker` stands for on this machine: it carries the marker,
    and (for an arch marker) at least one of its marks is not ``hardware=False``."""
    return any([_mark_needs_hardware(item, mark) for mark in item.iter_markers(marker)])


def register(config) -> None:
    for name, description in {**MARKERS, **SELECTION_MARKERS}.items():
        config.addinivalue_line("markers", f"{name}: {description}")


# ------------------------------------------------------------------ requirements

def found_text(snap: hardware.Snapshot) -> str:
    if not snap.cuda_available:
        where = "CPU, Triton interpreter" if snap.interpreter_active else "CPU"
        return f"found no CUDA device ({where})"
    if snap.interpreter_active:
        return (f"found {snap.describe()}, but {INTERPRET_ENV} is set so kernels run on "
                "the Triton interpreter")
    return f"found {snap.describe()}"


def _needs_gpu(snap: hardware.Snapshot, what: str) -> str | None:
    return None if snap.gpu_usable else f"needs {what}; {found_text(snap)}"


def _needs_capability(snap: hardware.Snapshot, what: str, accept) -> str | None:
    if snap.gpu_usable and accept(snap.capability):
        return None
    return f"needs {what}; {found_text(snap)}"


def _needs_packages(snap: hardware.Snapshot, what: str, names: tuple[str, ...]) -> str | None:
    missing = [name for name in names if not snap.has_package(name)]
    if not missing:
        return None
    return f"needs {what}; not importable: {', '.join(missing)}"


def _arch_requirement(marker: str, snap: hardware.Snapshot, settings: Settings) -> str | None:
    wanted = {"sm90": ("an SM90 GPU (compute capability 9.0)", lambda c: c == (9, 0)),
              "sm120": ("an SM12x GPU (compute capability 12.x)", lambda c: c[0] == 12)}
    what, accept = wanted[marker]
    if settings.arch_as == marker:
        return _needs_gpu(snap, f"a CUDA GPU to run {marker} tests in diagnosis mode "
                                "(the interpreter has no MMA instructions to test)")
    reason = _needs_capability(snap, what, accept)
    if reason is None and settings.arch_as is not None:
        return (f"not run in diagnosis mode: {arch.ARCH_OVERRIDE_ENV}={settings.arch_as} "
                f"forces the {settings.arch_as} tile table, so this test would not test "
                f"{marker}'s")
    return reason


def requirement(marker: str, snap: hardware.Snapshot, settings: Settings) -> str | None:
    """Why a test with `marker` cannot run here, or None when it can."""
    if marker in ARCH_MARKERS:
        return _arch_requirement(marker, snap, settings)
    if marker == "gpu":
        return _needs_gpu(snap, "a CUDA GPU outside the Triton interpreter")
    if marker == "fp8":
        return _needs_capability(snap, "a GPU with compute capability >= 8.9 (FP8 MMA)",
                                 lambda c: c >= (8, 9))
    if marker == "graph":
        return _needs_gpu(snap, "CUDA Graphs (a CUDA GPU outside the Triton interpreter)")
    if marker == "model":
        return _needs_packages(snap, "transformers and safetensors "
                                     "(pip install 'det-suite[model]')",
                               ("transformers", "safetensors"))
    if marker == "sglang":
        return _needs_packages(snap, "sglang (pip install 'det-suite[sglang]'; on a CPU, "
                                     "tox -e sglang-cpu installs the real wheel)", ("sglang",))
    if marker == "slow":
        if settings.run_slow or snap.gpu_usable:
            return None
        return f"runs only with --run-slow or on a GPU; {found_text(snap)}"
    if marker == "perf":
        if not settings.run_perf:
            return "runs only with --run-perf (timings need a quiet GPU and are opt-in)"
        return _needs_gpu(snap, "a CUDA GPU outside the Triton interpreter to time")
    raise AssertionError(f"no requirement written for marker {marker!r}")


def unmet_requirements(item, snap: hardware.Snapshot, settings: Settings) -> list[str]:
    """'marker: reason' for every det-suite marker on `item` this machine can't honour."""
    return [f"{marker}: {reason}" for marker in MARKERS
            if needs(item, marker)
            and (reason := requirement(marker, snap, settings)) is not None]


def runs_under_foreign_table(item, snap: hardware.Snapshot, settings: Settings) -> bool:
    if settings.arch_as is None or snap.family == settings.arch_as:
        return False
    return any(needs(item, marker) for marker in GPU_MARKERS)


def mark(item, snap: hardware.Snapshot, settings: Settings) -> None:
    """Skip `item` when this machine can't honour its markers, or label it diagnostic.
    A skip mark (rather than pytest.skip in setup) makes -ra point at the test, and nothing
    of the test (fixtures included) runs."""
    reasons = unmet_requirements(item, snap, settings)
    if reasons:
        item.user_properties.extend((NOT_RUN_PROPERTY, reason) for reason in reasons)
        item.add_marker(pytest.mark.skip(reason="; ".join(reasons)))
    elif runs_under_foreign_table(item, snap, settings):
        item.user_properties.append((DIAGNOSTIC_PROPERTY, settings.arch_as))


def diagnostic_outcome(report) -> str | None:
    """The outcome of a test that ran under a foreign tile table, from one of its reports
    (the call, or a setup that failed: an error); None for any other report."""
    ran = report.when == "call" or (report.when == "setup" and report.failed)
    if ran and any(name == DIAGNOSTIC_PROPERTY for name, _ in report.user_properties):
        return "error" if report.when == "setup" else report.outcome
    return None
