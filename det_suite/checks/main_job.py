"""`det-suite run`, the README's main job, as a library call.

Answers "does the shipped FP8 kernel keep its determinism promise on this machine?" with
the invariance harness: cached-suffix, batch-composition and 2- vs 3-stage comparisons of
det-suite's kernel under this machine's tile table, with the deliberately M-dependent
positive control that must be flagged. CPU-sized on the Triton interpreter without a GPU,
the Qwen3-8B shapes on a GPU. The model-level cache-hit proof joins it with the embedded
engine (issues 12 and 16).
"""

from __future__ import annotations

from dataclasses import dataclass

from det_suite.invariance.harness import InvarianceRun, InvarianceSettings, run_invariance

MAIN_JOB_PROVIDERS = ("det_suite:s2", "det_suite:s3", "control")


@dataclass(frozen=True)
class MainJobSettings:
    out: str = "results/run"


@dataclass
class MainJobResult:
    exit_code: int
    on_gpu: bool
    family: str
    family_source: str
    dispatch: str        # which FP8 provider deterministic mode uses here, and why
    invariance: InvarianceRun


def invariance_settings(out: str, on_gpu: bool) -> InvarianceSettings:
    if on_gpu:
        return InvarianceSettings(out=out, providers=MAIN_JOB_PROVIDERS, mode="full",
                                  shapes=("qwen3-8b", "k80-tail"), dtypes=("bf16",),
                                  seeds=(0,), graph=False)
    return InvarianceSettings(out=out, providers=MAIN_JOB_PROVIDERS, mode="quick")


def run_main_job(settings: MainJobSettings, *, announce=print) -> MainJobResult:
    import torch

    from det_suite.ops.dispatch import select_fp8_route
    from det_suite.platform.family import device_family, family_source
    from det_suite.platform.interpreter import interpreter_active

    on_gpu = torch.cuda.is_available() and not interpreter_active()
    family = device_family()
    decision = select_fp8_route(family=family, deterministic=True)
    dispatch = f"{decision.route.value} - {decision.reason}"
    announce(f"det-suite run: tile table {family} ({family_source()}); deterministic-mode "
             f"dispatch here: {dispatch}")
    if not on_gpu:
        import sys

        print("det-suite run: CPU only - checks run on the Triton interpreter with small "
              "shapes; GPU-only checks (CUDA Graph replay, vendor GEMMs) are not run",
              file=sys.stderr)
    run = run_invariance(invariance_settings(settings.out, on_gpu))
    return MainJobResult(exit_code=run.exit_code, on_gpu=on_gpu, family=family,
                         family_source=family_source(), dispatch=dispatch, invariance=run)
