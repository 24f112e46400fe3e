"""Synthetic checkpoints: the presets' shapes, same seed -> same bytes, sane weights and
calibrated scales, distinct logits, the tokenizer, and `det-suite synth` (issue 12, item 2)."""

import math

import pytest
import torch

pytestmark = pytest.mark.model


@pytest.mark.parametrize("key,value", [
    ("hidden_size", 4096), ("num_hidden_layers", 36), ("num_attention_heads", 32),
    ("num_key_value_heads", 8), ("head_dim", 128), ("intermediate_size", 12288),
    ("vocab_size", 151936), ("tie_word_embeddings", False), ("rms_norm_eps", 1e-6),
], ids=lambda v: str(v))
def test_the_qwen3_8b_preset_has_the_real_shapes(key, value):
    """Config only: the 8B-shaped weights are never materialised on the CPU."""
    from det_suite.models.synthetic import PRESETS
    assert getattr(PRESETS["qwen3-8b"].config(), key) == value


def test_the_qwen3_8b_preset_agrees_with_the_shape_catalog():
    from det_suite.models.catalog import projections
    from det_suite.models.checkpoint import linear_shapes
    from det_suite.models.synthetic import PRESETS
    shapes = linear_shapes(PRESETS["qwen3-8b"].config())
    fused = {"qkv": (shapes["q_proj"][0] + 2 * shapes["k_proj"][0], shapes["q_proj"][1]),
             "o": shapes["o_proj"], "down": shapes["down_proj"],
             "gate_up": (2 * shapes["gate_proj"][0], shapes["gate_proj"][1])}
    assert fused == {p.name: (p.n, p.k) for p in projections("qwen3-8b")}


def test_the_tiny_preset(tiny):
    from det_suite.models.tokenizer import vocab_size
    c = tiny.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
            c.head_dim, c.intermediate_size) == (64, 2, 4, 2, 16, 128)
    assert c.vocab_size == vocab_size() and 256 < c.vocab_size < 1000
    assert c.rope_parameters["rope_theta"] == 1e6 and not c.tie_word_embeddings
    assert tiny.source == "synthetic:tiny?seed=0"


def test_two_builds_of_one_seed_are_byte_equal(tiny, state_bytes):
    from det_suite.models.synthetic import build_synthetic
    again = state_bytes(build_synthetic("tiny", 0))
    first = state_bytes(tiny)
    differing = [name for name in first if again[name] != first[name]]
    print(f"{len(first)} tensors compared byte for byte, {len(differing)} differ")
    assert list(again) == list(first) and not differing


def test_another_seed_gives_other_weights(tiny, state_bytes):
    """Control for the test above: byte equality is not vacuous."""
    from det_suite.models.synthetic import build_synthetic
    other, first = state_bytes(build_synthetic("tiny", 1)), state_bytes(tiny)
    assert all(other[name] != first[name] for name in first if name.endswith("proj.weight"))


def test_two_writes_of_one_seed_are_the_same_files(tiny_dir, tmp_path):
    from det_suite.models.synthetic import write_synthetic
    again = write_synthetic("tiny", 0, tmp_path / "again")
    names = sorted(p.name for p in tiny_dir.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    assert all((tiny_dir / n).read_bytes() == (again / n).read_bytes() for n in names)


def test_the_hash_generator_is_index_pure():
    """A value depends on (seed, name, index) only: a longer tensor starts with a shorter one."""
    from det_suite.models.synthetic import bell, uniform
    for draw in (uniform, bell):
        long, short = draw((1000,), 7, "t", "cpu"), draw((10,), 7, "t", "cpu")
        assert torch.equal(long[:10], short)
        assert not torch.equal(short, draw((10,), 7, "u", "cpu"))


def test_bell_values_have_unit_std():
    from det_suite.models.synthetic import bell
    values = bell((100_000,), 0, "std", "cpu")
    # Statistical property of 1e5 draws: the sample std is within 1% of 1.
    assert abs(values.std().item() - 1.0) < 0.01 and abs(values.mean().item()) < 0.01
    assert values.abs().max().item() <= 2 * math.sqrt(3)


@pytest.mark.parametrize("name", ["q_proj", "k_proj", "o_proj", "down_proj"])
def test_weights_are_scaled_like_a_trained_model(tiny, name):
    linear = getattr(tiny.layers[0], name)
    std = (linear.weight.float() * linear.weight_scale).std().item()
    # Per-tensor gains spread the std over [0.75, 1.25) / sqrt(K), as trained layers differ.
    assert 0.7 < std * math.sqrt(linear.k) < 1.3


def test_per_tensor_weight_scales_differ_within_a_layer(tiny):
    """q/k/v (and gate/up) share an input but not a weight scale: fusing them must keep each."""
    layer = tiny.layers[0]
    scales = {name: lin.weight_scale.item() for name, lin in layer.linears().items()}
    assert len(set(scales.values())) == len(scales), scales


def test_norms_are_near_one(tiny):
    for layer in tiny.layers:
        for norm in (layer.input_layernorm, layer.post_attention_layernorm, layer.q_norm):
            assert norm.dtype == torch.bfloat16 and (norm.float() - 1).abs().max() <= 0.11


def test_input_scales_are_calibrated_from_activation_amax(tiny):
    """input_scale * 448 covers the calibration activations without wasting the FP8 range:
    between amax and amax rounded up to 4 significant bits (at most 1/8 more)."""
    from det_suite.models.reference import reference_model
    from det_suite.models.synthetic import PRESETS, calibration_ids
    model = reference_model(tiny)
    seen = {}
    module = model.model.layers[1].mlp.down_proj

    def record(_module, args):
        seen["amax"] = args[0].abs().max()
    module.register_forward_pre_hook(record)
    ids = calibration_ids(PRESETS["tiny"], 0, tiny.config.vocab_size)
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), use_cache=False)
    covered = tiny.layers[1].down_proj.input_scale.item() * 448
    assert seen["amax"].item() <= covered <= seen["amax"].item() * 1.125


@pytest.mark.parametrize("amax,expected", [(1.0, 1.0), (1.01, 1.125), (3.0, 3.0),
                                           (0.7, 0.75), (448.5, 480.0)],
                         ids=["power-of-two", "just-above", "exact", "below-one", "large"])
def test_round_up_amax_keeps_four_significant_bits(amax, expected):
    from det_suite.models.synthetic import round_up_amax
    assert round_up_amax(amax) == expected


@pytest.mark.parametrize("amax", [0.0, -1.0, float("nan"), float("inf")])
def test_round_up_amax_refuses_a_useless_amax(amax):
    from det_suite.models.synthetic import round_up_amax
    with pytest.raises(ValueError, match="amax"):
        round_up_amax(amax)


def test_logits_are_not_tied(tiny):
    """Greedy decoding needs a clear argmax: at every position the top two logits differ,
    and the argmax is not the same token everywhere."""
    from det_suite.models.reference import reference_model
    with torch.inference_mode():
        logits = reference_model(tiny)(input_ids=torch.arange(20, 52)[None], use_cache=False)
    top2 = logits.logits[0].topk(2, dim=-1).values
    assert bool((top2[:, 0] > top2[:, 1]).all())
    assert len(set(logits.logits[0].argmax(-1).tolist())) > 1


@pytest.mark.parametrize("seed", [-1, 1.5, True], ids=["negative", "float", "bool"])
def test_a_bad_seed_is_refused(seed):
    from det_suite.models.synthetic import build_synthetic
    with pytest.raises(ValueError, match="seed"):
        build_synthetic("tiny", seed)


def test_an_unknown_preset_is_refused():
    from det_suite.models.synthetic import build_synthetic
    with pytest.raises(ValueError, match="preset"):
        build_synthetic("qwen3-huge", 0)


def test_the_tokenizer_loads_with_auto_tokenizer_and_formats_chat(tiny_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    text = "Natalia sold 48 clips in April — héllo!"
    assert tok.decode(tok(text)["input_ids"]) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "2+2?"}],
                                     add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and len(tok) == 259


def test_det_suite_synth_writes_a_loadable_checkpoint(tmp_path, capsys):
    from det_suite.cli import main
    from det_suite.models.loader import load_checkpoint
    assert main(["synth", "--preset", "tiny", "--seed", "2", "--out", str(tmp_path),
                 "--device", "cpu"]) == 0
    assert "synthetic:tiny?seed=2" in capsys.readouterr().out
    assert load_checkpoint(tmp_path).config.num_hidden_layers == 2


def test_det_suite_synth_refuses_an_unknown_preset(tmp_path):
    from det_suite.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["synth", "--preset", "huge", "--out", str(tmp_path)])
    assert exit_.value.code == 2


# --- GPU: same bytes on another device; the 8B shapes built straight onto the GPU -------

@pytest.mark.gpu
def test_tiny_built_on_the_gpu_is_byte_equal_to_the_cpu_build(tiny, state_bytes):
    from det_suite.models.synthetic import build_synthetic
    gpu, cpu = state_bytes(build_synthetic("tiny", 0, device="cuda")), state_bytes(tiny)
    differing = [name for name in cpu if gpu[name] != cpu[name]]
    print(f"{len(cpu)} tensors compared byte for byte, {len(differing)} differ: {differing[:5]}")
    assert not differing


@pytest.mark.gpu
@pytest.mark.slow
def test_qwen3_8b_builds_on_the_gpu_with_distinct_logits():
    import time

    from det_suite.models.reference import reference_logprobs
    from det_suite.models.synthetic import build_synthetic
    start = time.perf_counter()
    ckpt = build_synthetic("qwen3-8b", 0, device="cuda")
    torch.cuda.synchronize()
    print(f"synthetic:qwen3-8b built in {time.perf_counter() - start:.1f} s")
    assert ckpt.layers[35].down_proj.weight.shape == (4096, 12288)
    assert ckpt.layers[0].q_proj.weight.is_cuda
    scales = [lin.input_scale.item() for layer in ckpt.layers for lin in layer.linears().values()]
    assert all(math.isfinite(s) and s > 0 for s in scales)
    logprobs = reference_logprobs(ckpt, list(range(1000, 1032)))
    assert bool(torch.isfinite(logprobs).all()) and logprobs.unique().numel() > 1


def test_det_suite_synth_shows_progress_and_leaves_only_the_folder(tmp_path, capsys):
    from det_suite.cli import main
    assert main(["synth", "--preset", "tiny", "--out", str(tmp_path / "ckpt"),
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "det-suite synth: calibrating input scales" in out
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_det_suite_synth_interrupted_leaves_no_partial_checkpoint(tmp_path, monkeypatch,
                                                                  capsys):
    """The issue's case: Ctrl-C mid-build used to leave config.json alone in --out."""
    from det_suite.cli import main
    from det_suite.models import checkpoint

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(checkpoint, "shard_plan", interrupted)   # after config.json is written
    assert main(["synth", "--preset", "tiny", "--out", str(tmp_path / "ckpt"),
                 "--device", "cpu"]) == 130
    assert list(tmp_path.iterdir()) == []


def test_det_suite_synth_refuses_a_gpu_sized_preset_on_the_cpu(tmp_path, capsys):
    from det_suite.cli import main
    assert main(["synth", "--preset", "qwen3-4b", "--out", str(tmp_path / "ckpt"),
                 "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--preset qwen3-4b is GPU-sized" in err and "16 GB" in err and "--allow-cpu" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_det_suite_synth_will_not_replace_a_folder_that_is_no_checkpoint(tmp_path, capsys):
    from det_suite.cli import main
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["synth", "--preset", "tiny", "--out", str(tmp_path), "--device", "cpu"]) == 2
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_parameter_count_matches_the_published_model():
    """Qwen3-8B's model card: 8.2B parameters. The CPU refusal's estimate rests on this."""
    from det_suite.models.synthetic import preset
    assert round(preset("qwen3-8b").parameters() / 1e9, 1) == 8.2
