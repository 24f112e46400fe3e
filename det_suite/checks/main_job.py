"""`det-suite run`, the README's main job, as a library call.

Answers "does the shipped FP8 kernel keep its determinism promise on this machine?" with
the invariance harness: cached-suffix, batch-composition and 2- vs 3-stage comparisons of
det-suite's kernel under this machine's tile table, with the deliberately M-dependent
positive control that must be flagged. CPU-sized on the Triton interpreter without a GPU,
the Qwen3-8B shapes on a GPU. Then the model-level proof: the cache-hit check on the
embedded engine (det mode beside the stock control, every hit proven by its cached-token
count) on the tiny synthetic model on the CPU, or the 8B-shaped one on a GPU with the
memory for it. One verdict per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from det_suite.checks.cache_hit import (PRESETS, CacheHitResult, CacheHitSettings,
                                        EngineVariant, run_cache_hit)
from det_suite.invariance.harness import InvarianceRun, InvarianceSettings, run_invariance

MAIN_JOB_PROVIDERS = ("det_suite:s2", "det_suite:s3", "control")
# The 8B-shaped synthetic model, its fp32 calibration copy and the KV pages need about
# 48 GB at their peak; a smaller GPU runs the tiny model instead.
EIGHT_B_MIN_BYTES = 64 * 2 ** 30


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
    cache_hit: CacheHitResult | None = None
    cache_hit_out: str | None = None
    run_id: str | None = None

    def verdict_lines(self) -> list[str]:
        kernel = "PASS" if self.invariance.exit_code == 0 else "FAIL"
        lines = [f"kernel (invariance, positive control flagged): {kernel}"]
        if self.run_id:
            lines.append(f"run id {self.run_id} (in every result written)")
        if self.cache_hit is not None:
            hit = self.cache_hit
            model = hit.settings.get("model")
            lines.append(f"model (cache-hit on {model}, det mode): "
                         f"{'PASS' if hit.exit_code == 0 else 'FAIL'}; control "
                         + ("reproduced the problem" if hit.control_reproduced else
                            "did not reproduce it here")
                         + "; positive control (m-dependent) "
                         + {True: "flagged", False: "NOT flagged (FAIL)",
                            None: "not run"}[hit.control_flagged])
        return lines


def invariance_settings(out: str, on_gpu: bool) -> InvarianceSettings:
    if on_gpu:
        return InvarianceSettings(out=out, providers=MAIN_JOB_PROVIDERS, mode="full",
                                  shapes=("qwen3-8b", "k80-tail"), dtypes=("bf16",),
                                  seeds=(0,), graph=False)
    return InvarianceSettings(out=out, providers=MAIN_JOB_PROVIDERS, mode="quick")


def cache_hit_settings(on_gpu: bool, *, announce=print) -> CacheHitSettings:
    """The seed's matrix on the 8B-shaped model where a GPU holds it (eager engine: the graph
    and chunked engines are `det-suite cache-hit`'s), else the CPU-sized protocol on tiny."""
    model, device, preset = "synthetic:tiny?seed=0", "cpu", "small"
    if on_gpu:
        import torch

        device, preset = "cuda", "full"
        if torch.cuda.get_device_properties(0).total_memory >= EIGHT_B_MIN_BYTES:
            model = "synthetic:qwen3-8b?seed=0"
    return CacheHitSettings(model=model, device=device, variants=(EngineVariant(),),
                            progress=announce, **PRESETS[preset])


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
    from pathlib import Path

    from det_suite.checks.cache_hit_report import write_report
    from det_suite.reports.environment import environment
    from det_suite.reports.run_folder import staged_run

    out = Path(settings.out)
    # Written beside --out and swapped in whole at the end: an interrupted run leaves the
    # previous results as they were, never half of each.
    with staged_run(out) as (staging, run_id):
        run = run_invariance(invariance_settings(str(staging), on_gpu))
        hit = run_cache_hit(cache_hit_settings(on_gpu, announce=announce))
        write_report(hit, staging / "cache_hit", environment())
    run.paths = {k: str(out / Path(v).relative_to(staging)) for k, v in run.paths.items()}
    return MainJobResult(exit_code=max(run.exit_code, hit.exit_code), on_gpu=on_gpu,
                         family=family, family_source=family_source(), dispatch=dispatch,
                         invariance=run, cache_hit=hit, cache_hit_out=str(out / "cache_hit"),
                         run_id=run_id)
