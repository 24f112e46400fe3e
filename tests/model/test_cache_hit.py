"""The cache-hit check's logic on the tiny synthetic model: it passes an invariant engine
with proven hits, flags an M-dependent one (the positive control), fails a "hit" without
cached tokens, says when the control did not reproduce, writes its report; and det mode's
own kernels are exact after a hit while the stock control's delta is reported."""

import dataclasses
import json

import pytest
import torch

from det_suite.backends.embedded import EmbeddedBackend
from det_suite.checks.cache_hit import (PRESETS, CacheHitSettings, EngineVariant,
                                        run_cache_hit)
from det_suite.checks.cache_hit_report import render_markdown, verdict_lines, write_report
from det_suite.engine.opsets import stock_fp8_linear
from det_suite.platform.interpreter import interpreter_active
from tests.model.rowwise_ops import rowwise_opset

pytestmark = pytest.mark.model

SMALL = {**PRESETS["small"], "progress": None}


def _m_dependent_opset():
    """Rowwise, except the FP8 linear's result moves by one BF16 ulp-scale step when the call
    has more than one row: what an M-dependent GEMM schedule does to a cache hit."""
    def linear(x, lin):
        out = stock_fp8_linear(x, lin)
        rows = x.reshape(-1, x.shape[-1]).shape[0]
        return out * (1 + 2 ** -7) if rows > 1 else out
    return dataclasses.replace(rowwise_opset("m-dependent"), fp8_linear=linear)


def _factory(tiny, ops_by_mode):
    def make(mode, variant):
        return EmbeddedBackend("synthetic:tiny?seed=0", mode=mode, checkpoint=tiny,
                               device="cpu", ops=ops_by_mode[mode], page_size=SMALL["page_size"],
                               chunk_size=variant.chunk_size, max_seq_len=64, num_pages=128)
    return make


def _run(tiny, ops_by_mode, **overrides):
    settings = CacheHitSettings(**{**SMALL, "modes": tuple(ops_by_mode),
                                   "variants": (EngineVariant(), EngineVariant(chunk_size=5)),
                                   **overrides})
    return run_cache_hit(settings, backend_factory=_factory(tiny, ops_by_mode),
                         vocab=tiny.config.vocab_size)


@pytest.fixture(scope="module")
def invariant_vs_m_dependent(tiny):
    return _run(tiny, {"det": rowwise_opset(), "stock": _m_dependent_opset()}, batches=(2,))


def test_invariant_engine_passes_with_every_hit_proven(invariant_vs_m_dependent):
    result = invariant_vs_m_dependent
    det = result.rows("det")
    # (hit, warm) x 2 engines, plus the chunked engine's cold-vs-eager row.
    assert len(det) == 5
    assert all(c.exact and c.values > 0 for c in det)
    assert all(c.cached_tokens > 0 for c in det if c.phase in ("hit", "warm"))
    assert result.det_exact and result.exit_code == 0


def test_m_dependent_control_is_flagged(invariant_vs_m_dependent):
    stock = invariant_vs_m_dependent.rows("stock")
    assert invariant_vs_m_dependent.control_reproduced
    assert any(c.max_abs_delta > 0 for c in stock)
    assert any("reproduces" in line for line in verdict_lines(invariant_vs_m_dependent))


def test_m_dependent_det_mode_fails_the_check(tiny):
    result = _run(tiny, {"det": _m_dependent_opset()}, batches=(2,))
    assert not result.det_exact and result.exit_code == 1
    assert any("NOT exact" in line for line in verdict_lines(result))


class _NoCacheBackend:
    """Exact by construction (flushes before every call), so it never reports a hit."""

    def __init__(self, inner):
        self.inner, self.name = inner, "no-cache"

    def generate(self, requests):
        self.inner.flush_cache()
        return self.inner.generate(requests)

    def flush_cache(self):
        self.inner.flush_cache()

    def close(self):
        self.inner.close()


def test_equal_results_without_a_cache_hit_fail_the_case(tiny):
    inner = _factory(tiny, {"det": rowwise_opset()})
    settings = CacheHitSettings(**{**SMALL, "modes": ("det",), "batches": (1,),
                                   "variants": (EngineVariant(),)})
    result = run_cache_hit(settings, backend_factory=lambda m, v: _NoCacheBackend(inner(m, v)),
                           vocab=tiny.config.vocab_size)
    assert all(c.exact for c in result.comparisons)
    assert not any(c.hit_proven for c in result.comparisons)
    assert result.exit_code == 1


def test_a_control_without_differences_is_reported_as_not_reproduced(tiny):
    result = _run(tiny, {"stock": rowwise_opset()}, batches=(1,))
    assert result.control_reproduced is False
    text = " ".join(verdict_lines(result))
    assert "did NOT reproduce" in text and "fixes" in text


def test_report_holds_raw_values_and_a_table(invariant_vs_m_dependent, tmp_path):
    out = write_report(invariant_vs_m_dependent, tmp_path / "report")
    payload = json.loads((out / "cache_hit.json").read_text())
    row = payload["comparisons"][0]
    assert row["cold_logprobs"] and len(row["cold_logprobs"]) == row["values"]
    assert payload["det_exact"] is True and payload["exit_code"] == 0
    markdown = (out / "cache_hit.md").read_text()
    assert "| mode | engine |" in markdown
    assert render_markdown(invariant_vs_m_dependent) == markdown


@pytest.mark.parametrize("overrides, match", [
    pytest.param({"prefixes": (2,)}, "page_size", id="prefix-shorter-than-a-page"),
    pytest.param({"modes": ("fast",)}, "modes", id="unknown-mode"),
    pytest.param({"batches": (0,)}, "batches", id="zero-batch"),
    pytest.param({"max_new_tokens": 0}, "max_new_tokens", id="zero-new-tokens"),
])
def test_bad_settings_are_refused_by_name(overrides, match):
    with pytest.raises(ValueError, match=match):
        CacheHitSettings(**{**SMALL, **overrides})


def test_det_kernels_are_exact_after_a_hit_and_the_control_delta_is_reported(tiny):
    """The real op sets, one batched case, det and stock: on the Triton interpreter on a CPU
    machine, compiled on a GPU machine (the CPU is no place for kernels there)."""
    device = "cpu" if interpreter_active() or not torch.cuda.is_available() else "cuda"
    settings = CacheHitSettings(**{**SMALL, "model": "synthetic:tiny?seed=0",
                                   "batches": (2,), "variants": (EngineVariant(),),
                                   "max_new_tokens": 1, "device": device})
    result = run_cache_hit(settings, backend_factory=lambda mode, variant: EmbeddedBackend(
        settings.model, mode=mode, checkpoint=tiny, device=device, page_size=4,
        max_seq_len=64, num_pages=128), vocab=tiny.config.vocab_size)
    for line in verdict_lines(result):
        print(line)
    det, stock = result.rows("det"), result.rows("stock")
    assert det and all(c.cached_tokens > 0 for c in det)
    assert result.det_exact, [(c.phase, c.max_abs_delta) for c in det]
    assert stock and result.control_reproduced is not None
    # det mode is right, not only stable: its logprobs sit near the control's.
    delta = (torch.tensor(det[0].cold_logprobs) - torch.tensor(stock[0].cold_logprobs)).abs()
    assert delta.max() < 0.5, delta


# -- on a GPU ---------------------------------------------------------------------------------

EAGER_AND_GRAPH = (EngineVariant(), EngineVariant(cuda_graph=True))
CHUNKED = (EngineVariant(), EngineVariant(chunk_size=256), EngineVariant(chunk_size=1000))


def _gpu_run(model: str, **overrides):
    settings = CacheHitSettings(**{**PRESETS["full"], "model": model, "device": "cuda",
                                   **overrides})
    result = run_cache_hit(settings)
    for line in verdict_lines(result):
        print(line)
    return result


def _failures(result):
    return [(c.engine, c.prefix, c.batch, c.phase, c.cached_tokens, c.max_abs_delta)
            for c in result.rows("det") if not c.passed]


@pytest.mark.gpu
@pytest.mark.graph
def test_tiny_matrix_is_exact_in_det_mode_on_gpu():
    result = _gpu_run("synthetic:tiny?seed=0", prefixes=(128, 512), max_new_tokens=8,
                      variants=EAGER_AND_GRAPH + CHUNKED[1:])
    assert result.det_exact, _failures(result)


@pytest.mark.gpu
@pytest.mark.graph
@pytest.mark.slow
def test_qwen3_8b_shaped_matrix_is_exact_in_det_mode():
    """The seed's 18 cases on synthetic:qwen3-8b, eager and CUDA Graph, det and stock."""
    result = _gpu_run("synthetic:qwen3-8b?seed=0", variants=EAGER_AND_GRAPH)
    assert result.det_exact, _failures(result)


@pytest.mark.gpu
@pytest.mark.slow
def test_qwen3_8b_shaped_chunked_prefill_equals_unchunked():
    result = _gpu_run("synthetic:qwen3-8b?seed=0", modes=("det",), variants=CHUNKED,
                      prefixes=(1024, 4096), batches=(1, 2), repetitions=1)
    assert result.det_exact, _failures(result)
