"""Tied embeddings (config.tie_word_embeddings: the lm_head is the embedding matrix, as
Qwen3-0.6B/1.7B/4B ship): a synthetic tied checkpoint stores the matrix once, loads back
tied, and the engine, the reference forward and the cache-hit check run on it."""

import json

import pytest
import torch

from det_suite.models.synthetic import PRESETS

pytestmark = pytest.mark.model


def test_a_tied_checkpoint_holds_one_matrix(tiny_tied):
    assert tiny_tied.config.tie_word_embeddings
    assert tiny_tied.tied and tiny_tied.lm_head is tiny_tied.embed_tokens
    assert "lm_head.weight" not in tiny_tied.state_dict()


def test_moving_a_tied_checkpoint_keeps_it_tied(tiny_tied):
    moved = tiny_tied.to("cpu")
    assert moved.tied and torch.equal(moved.lm_head, tiny_tied.lm_head)


def test_moving_to_a_device_that_copies_keeps_one_matrix(tiny_tied):
    """A move that really copies (to "meta" here; to the GPU in use) must copy the matrix
    once: the CPU-to-CPU move above returns the same tensors and cannot tell."""
    moved = tiny_tied.to("meta")
    assert moved.embed_tokens.device.type == "meta"
    assert moved.tied and moved.lm_head is moved.embed_tokens


def test_the_written_files_store_the_matrix_once(tiny_tied_dir):
    from safetensors import safe_open

    config = json.loads((tiny_tied_dir / "config.json").read_text())
    assert config["tie_word_embeddings"] is True
    names = set()
    for shard in tiny_tied_dir.glob("*.safetensors"):
        with safe_open(shard, "pt") as f:
            names |= set(f.keys())
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names


def test_loading_a_tied_checkpoint_ties_it_again(tiny_tied, tiny_tied_dir, state_bytes):
    from det_suite.models.loader import load_checkpoint

    loaded = load_checkpoint(tiny_tied_dir, device="cpu")
    assert loaded.tied
    assert state_bytes(loaded) == state_bytes(tiny_tied)


@pytest.mark.parametrize("name, tied", [("qwen3-4b", True), ("qwen3-8b", False),
                                        ("qwen3-14b", False), ("qwen3-32b", False)])
def test_published_presets_tie_as_their_models_do(name, tied):
    assert PRESETS[name].config().tie_word_embeddings is tied


def test_an_untied_preset_keeps_its_own_lm_head(tiny):
    """tiny's lm_head is its own matrix, stored under its own name (that tiny still gives
    the outputs its committed GSM8K fixture recorded is test_gsm8k_recorded's check)."""
    assert not tiny.tied and "lm_head.weight" in tiny.state_dict()
    assert not torch.equal(tiny.lm_head, tiny.embed_tokens)


def test_det_mode_agrees_with_the_reference_forward_on_a_tied_model():
    """reference-check's own criterion (det mode as close to the fp32 reference as the stock
    path is) on a model whose reference reads the one matrix as its lm_head."""
    from det_suite.checks.reference_agreement import ReferenceSettings, run_reference_agreement

    result = run_reference_agreement(ReferenceSettings(
        model="synthetic:tiny-tied?seed=0", prompts=2, prompt_len=12, max_new_tokens=2,
        progress=None))
    assert all(arm.logprobs == 2 * (12 - 1 + 2) for arm in result.arms.values())
    assert result.passed, result.problems


def test_the_cache_hit_check_passes_a_tied_model_with_hits_proven(tiny_tied, device):
    """On the kernel device: the GPU where there is one (det-suite's kernels do not run on
    CPU tensors outside the interpreter), else the CPU under the interpreter."""
    from det_suite.backends.embedded import EmbeddedBackend
    from det_suite.checks.cache_hit import PRESETS as CHECK_PRESETS
    from det_suite.checks.cache_hit import CacheHitSettings, EngineVariant, run_cache_hit

    settings = CacheHitSettings(**{**CHECK_PRESETS["small"], "progress": None,
                                   "model": "synthetic:tiny-tied?seed=0", "modes": ("det",),
                                   "prefixes": (8,), "suffix": 3,
                                   "batches": (2,), "variants": (EngineVariant(),),
                                   "max_new_tokens": 1, "device": device})
    checkpoint = tiny_tied.to(device)
    result = run_cache_hit(settings, backend_factory=lambda mode, variant: EmbeddedBackend(
        settings.model, mode=mode, checkpoint=checkpoint, device=device, page_size=4,
        max_seq_len=64, num_pages=128), vocab=tiny_tied.config.vocab_size)
    det = result.rows("det")
    print(f"{len(det)} det comparisons, cached tokens {[c.cached_tokens for c in det]}")
    assert det and all(c.cached_tokens > 0 for c in det)
    assert result.det_exact
