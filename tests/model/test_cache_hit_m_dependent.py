"""The model-level positive control on the tiny synthetic model: the real m-dependent arm
(`engine.m_dependent`, det's kernels with FP8 linears whose K-chunk count follows M), run
through the cache-hit check's own engine factory, is flagged with every hit proven and the
differing comparisons counted; the same arm made M-invariant fails the check."""

import pytest

from det_suite.checks.cache_hit import (M_DEPENDENT, NOT_SHOWN, PRESETS, CacheHitSettings,
                                        EngineVariant, run_cache_hit)
from det_suite.checks.cache_hit_report import verdict_lines

pytestmark = pytest.mark.model

# One case (prefix 12, batch 1): cold prefill runs M = 17 rows (3 K chunks), the hit its
# 9-row suffix (2 chunks), so the rounding of every FP8 linear's sum differs.
SETTINGS = dict(PRESETS["small"], batches=(1,), modes=(M_DEPENDENT,),
                variants=(EngineVariant(),), progress=print)


@pytest.fixture(scope="module")
def control_run(kernel_device):
    return run_cache_hit(CacheHitSettings(**SETTINGS, device=kernel_device))


def test_the_m_dependent_arm_is_flagged_with_every_hit_proven(control_run):
    rows = control_run.rows(M_DEPENDENT)
    assert [c.phase for c in rows] == ["hit", "warm"]
    # The hit reuses the prefix's whole pages before the first scored position (12 - 1 tokens
    # -> 2 pages of 4), and compares every suffix prompt logprob and every generated one.
    assert all(c.cached_tokens == 8 and c.hit_proven for c in rows)
    assert all(c.values == SETTINGS["suffix"] + SETTINGS["max_new_tokens"] for c in rows)
    differing = control_run.control_differences()
    assert differing and all(c.max_abs_delta > 0 for c in differing)
    assert control_run.control_flagged is True and control_run.exit_code == 0
    line = next(x for x in verdict_lines(control_run) if "positive control" in x)
    print(line)
    assert f"{len(differing)} of 2 hit comparisons differ" in line


def test_the_arm_made_m_invariant_fails_the_check(monkeypatch, kernel_device):
    import det_suite.engine.m_dependent as control

    monkeypatch.setattr(control, "k_chunks", lambda m, k: 2)
    result = run_cache_hit(CacheHitSettings(**SETTINGS, device=kernel_device))
    assert all(c.exact for c in result.rows(M_DEPENDENT))
    assert result.control_flagged is False and result.exit_code == 1
    assert any(NOT_SHOWN in line for line in verdict_lines(result))


# -- on a GPU ---------------------------------------------------------------------------------

def _gpu_control(model: str, **overrides):
    settings = CacheHitSettings(**{**PRESETS["full"], "model": model, "device": "cuda",
                                   "modes": (M_DEPENDENT,), "progress": print, **overrides})
    result = run_cache_hit(settings)
    for line in verdict_lines(result):
        print(line)
    return result


@pytest.mark.gpu
@pytest.mark.graph
def test_the_m_dependent_arm_is_flagged_on_the_gpu_eager_and_graph():
    result = _gpu_control("synthetic:tiny?seed=0", prefixes=(128,), batches=(1, 4),
                          repetitions=1, variants=(EngineVariant(), EngineVariant(True)))
    assert all(c.hit_proven for c in result.rows(M_DEPENDENT))
    assert result.control_flagged is True and result.exit_code == 0


@pytest.mark.gpu
@pytest.mark.slow
def test_the_m_dependent_arm_is_flagged_on_the_8b_shaped_model():
    result = _gpu_control("synthetic:qwen3-8b?seed=0", prefixes=(128, 1024), batches=(1, 4),
                          repetitions=1, variants=(EngineVariant(True),))
    assert result.control_flagged is True and result.exit_code == 0
