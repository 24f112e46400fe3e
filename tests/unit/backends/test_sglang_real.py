"""det-suite against the real SGLang wheel on a CPU (tox -e sglang-cpu; skipped elsewhere,
the reason naming that env).

Real: SGLang's plugin loader and hook registry, `ModelOptFp8Config` and
`ModelOptFp8LinearMethod` (create_weights, process_weights_after_loading, apply),
`requantize_with_max_scale` / `convert_to_channelwise`, the published runtime context
(`prepare_server_args` + `publish`), the scheduler's logprob processor, and the
`GenerateReqInput` normalisation. Stubbed (tests/unit/backends/real_sglang.py says how):
`scaled_fp8_quant` (CUDA kernel), `apply_fp8_linear` (CUTLASS / _scaled_mm), and
`torchvision` where its CPU build is missing. Not exercised: SGLang's weight loader
(shards are copied into the parameters as it would leave them) and any server process.
"""

from __future__ import annotations

import dataclasses
import json
import pkgutil
import types

import pytest
import torch

from det_suite.backends.interface import Request
from det_suite.backends.sglang import plugin
from det_suite.backends.sglang.client import generate_body, parse_completion
from det_suite.backends.sglang.server import ServerSettings, server_command
from det_suite.models.synthetic_linear import make_activations
from det_suite.ops import fp8_linear
from det_suite.ops.dispatch import OTHER_ARCH_ENV
from tests.unit.backends import real_sglang

pytestmark = pytest.mark.sglang

K, SHARDS = 64, (32, 32)   # a fused two-shard layer (gate_up / qkv), small for the interpreter


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    """What `det-suite synth tiny` writes."""
    from det_suite.models.synthetic import write_synthetic

    return write_synthetic("tiny", 0, tmp_path_factory.mktemp("synth") / "tiny", device="cpu")


@pytest.fixture(scope="module")
def published(synth_dir):
    """SGLang's runtime context published from a real command line: deterministic mode."""
    real_sglang.import_sglang()
    from sglang.srt import runtime_context
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(["--model-path", str(synth_dir), "--device", "cpu",
                                "--enable-deterministic-inference",
                                "--attention-backend", "triton"])
    runtime_context.publish(args, role="scheduler")
    return runtime_context


@pytest.fixture
def hooks_loaded(monkeypatch, published):
    """SGLang's own load_plugins(): finds det-suite's entry point, runs it, applies hooks.
    The patched class attributes are restored afterwards."""
    import sglang.srt.plugins as plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    real_sglang.stub_cuda_kernels(monkeypatch)
    method_class = pkgutil.resolve_name(plugin.METHOD_CLASS)
    for name in ("apply", "process_weights_after_loading"):
        monkeypatch.setattr(method_class, name, method_class.__dict__[name])
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    monkeypatch.setattr(plugin, "_state", plugin._ProcessState())
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    # The interpreter and an H200 alike: det-suite's kernel is opt-in off SM12x.
    monkeypatch.setenv(OTHER_ARCH_ENV, "det_suite")
    plugins.load_plugins()
    yield method_class
    HookRegistry.reset()


def _config():
    from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp8Config

    return ModelOptFp8Config.from_config({"quant_method": "modelopt", "quant_algo": "FP8",
                                          "kv_cache_quant_algo": None, "ignore": ["lm_head"]})


def fused_layer(method, *, seed=0):
    """create_weights for two shards, each shard's FP8 weight and scales copied in, then
    SGLang's process_weights_after_loading (requantize to the max scale)."""
    gen = torch.Generator().manual_seed(seed)
    layer = torch.nn.Module()
    method.create_weights(layer, K, list(SHARDS), K, sum(SHARDS), torch.bfloat16,
                          weight_loader=None)
    weight = (torch.randn(sum(SHARDS), K, generator=gen) * 40).to(torch.float8_e4m3fn)
    layer.weight.data.copy_(weight)
    layer.weight_scale.data.copy_(torch.tensor([0.004, 0.006]))
    layer.input_scale.data.copy_(torch.tensor([0.02, 0.03]))
    method.process_weights_after_loading(layer)
    return layer


def upstream_calls(monkeypatch):
    import sglang.srt.layers.quantization.modelopt_quant as modelopt

    calls = []
    real = modelopt.apply_fp8_linear

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(modelopt, "apply_fp8_linear", counting)
    return calls


# -- the plugin in real SGLang -----------------------------------------------------------------

def test_load_plugins_finds_the_entry_point_and_applies_both_hooks(hooks_loaded):
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    registered = {(target, hook_type, hook, src.plugin_name)
                  for target, hooks in HookRegistry._hooks.items()
                  for hook_type, hook, src in hooks}
    assert registered >= {
        (plugin.APPLY_TARGET, HookType.AROUND, plugin.around_apply, "det_suite"),
        (plugin.LOADED_TARGET, HookType.AFTER, plugin.after_weights_loaded, "det_suite")}
    assert plugin.APPLY_TARGET in HookRegistry._patched
    assert plugin.LOADED_TARGET in HookRegistry._patched
    assert plugin.hook_is_live()


@pytest.mark.parametrize("cutlass", [pytest.param(False, id="per-tensor-scale"),
                                     pytest.param(True, id="channelwise-broadcast-scale")])
def test_det_mode_on_a_fused_layer_is_fp8_linear_bit_for_bit(hooks_loaded, monkeypatch,
                                                              cutlass):
    """The real method through loading; with CUTLASS (no FlashInfer BMM) SGLang keeps the
    max scale per channel, all equal, which the plugin serves as that one value."""
    from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp8LinearMethod

    method = ModelOptFp8LinearMethod(_config())
    method.cutlass_fp8_supported = cutlass
    layer = fused_layer(method)
    assert layer.weight.shape == (K, sum(SHARDS)) and layer.weight.stride(0) == 1
    assert layer.weight_scale.numel() == (sum(SHARDS) if cutlass else 1)
    calls = upstream_calls(monkeypatch)
    x = make_activations(5, K)
    y = method.apply(layer, x)
    scale = layer.weight_scale.reshape(-1)[:1]
    expected = fp8_linear(x, layer.weight.t(), scale, layer.input_scale)
    assert not calls and torch.equal(y, expected)
    # Rows do not depend on M: each row alone is the same bits.
    for row in range(x.shape[0]):
        assert torch.equal(method.apply(layer, x[row:row + 1]), y[row:row + 1])
    assert plugin.routing_counts()["det_suite"] == 1


def test_normal_mode_stays_upstream(hooks_loaded, monkeypatch, published):
    from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp8LinearMethod

    monkeypatch.setattr(plugin, "deterministic_inference", lambda: False)
    method = ModelOptFp8LinearMethod(_config())
    layer = fused_layer(method)
    calls = upstream_calls(monkeypatch)
    method.apply(layer, make_activations(3, K))
    counts = plugin.routing_counts()
    assert len(calls) == 1 and (counts["det_suite"], counts["upstream"]) == (0, 1)
    assert "normal mode" in next(iter(counts["reasons"]))


def test_the_plugin_reads_sglangs_published_deterministic_flag(published):
    assert plugin.deterministic_inference() is True


# -- what det-suite writes, as SGLang reads it -------------------------------------------------

def test_sglang_excludes_lm_head_from_every_config_file_synth_writes(synth_dir):
    real_sglang.import_sglang()
    from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp8Config

    config = json.loads((synth_dir / "config.json").read_text())["quantization_config"]
    nested = json.loads((synth_dir / "hf_quant_config.json").read_text())
    for source in (config, nested):
        parsed = ModelOptFp8Config.from_config(source)
        assert parsed.is_layer_excluded("lm_head"), source
        assert not parsed.is_layer_excluded("model.layers.0.mlp.gate_up_proj")


def test_control_the_flat_format_without_ignore_quantizes_lm_head(synth_dir):
    """Issue 37 item 2's defect, kept as the control: `exclude_modules` alone is not read."""
    real_sglang.import_sglang()
    from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp8Config

    config = json.loads((synth_dir / "config.json").read_text())["quantization_config"]
    del config["ignore"]
    assert not ModelOptFp8Config.from_config(config).is_layer_excluded("lm_head")


def test_sglangs_parser_accepts_every_launcher_command_line(synth_dir):
    real_sglang.import_sglang()
    from sglang.srt.server_args import prepare_server_args

    for options in ({}, {"cuda_graph": False, "page_size": 16, "chunked_prefill_size": 256},
                    {"plugin": False}, {"tp_size": 2, "dp_size": 2}):
        settings = ServerSettings(str(synth_dir), **options)
        args = prepare_server_args(server_command(settings, 31000)[3:] + ["--device", "cpu"])
        assert args.enable_deterministic_inference and args.attention_backend == "triton"
        assert args.port == 31000
        assert {"tp_size": args.tp_size, "dp_size": args.dp_size} == settings.parallel


# -- the response path: SGLang's logprob processor, then det-suite's parser ------------------

def _processed(prompt, start, vocab, values):
    """The real scheduler logprob processor on one regular (not scoring) request."""
    from sglang.srt.managers.scheduler_components.logprob_result_processor import \
        SchedulerLogprobResultProcessor

    processor = SchedulerLogprobResultProcessor(
        model_config=types.SimpleNamespace(vocab_size=vocab))
    req = types.SimpleNamespace(origin_input_ids=list(prompt), logprob_start_len=start,
                                is_prefill_only=False, token_indices_to_pool=None,
                                multi_item_delimiter_indices=None,  # 0.5.18's field
                                logprob=types.SimpleNamespace())
    processor._process_input_token_logprobs(req, list(values))
    return [[v, i, None] for v, i in zip(req.logprob.input_token_logprobs_val,
                                         req.logprob.input_token_logprobs_idx)]


@pytest.mark.parametrize("prompt", [pytest.param((5, 258, 7, 258), id="holds-vocab-minus-1"),
                                    pytest.param((5, 6, 7, 8), id="ordinary")])
def test_parse_completion_reads_what_the_real_logprob_processor_writes(prompt, published):
    vocab, request = 259, Request(prompt, 1, logprobs_from=1)
    start = max(request.logprobs_from, 1) - 1
    # The forward pass scores positions start+1.. plus the sampled one (dropped by SGLang).
    entries = _processed(prompt, start, vocab, [-1.0, -2.0, -3.0, -9.0])
    item = {"output_ids": [4], "meta_info": {"input_token_logprobs": entries,
                                             "output_token_logprobs": [[-4.0, 4, None]],
                                             "cached_tokens": 0}}
    done = parse_completion(request, item, vocab_size=vocab)
    assert done.logprobs == (-1.0, -2.0, -3.0, -4.0)


def test_control_without_the_vocab_the_echo_of_vocab_minus_1_fails(published):
    """(published: the processor reads the runtime context's feature flags.)"""
    request = Request((5, 258), 1, logprobs_from=1)
    entries = _processed(request.prompt_ids, 0, 259, [-1.0, -9.0])
    assert [e[1] for e in entries] == [5, 0]   # SGLang's clip, the reason for vocab_size
    item = {"output_ids": [4], "meta_info": {"input_token_logprobs": entries,
                                             "output_token_logprobs": [[-4.0, 4, None]],
                                             "cached_tokens": 0}}
    with pytest.raises(Exception, match="window moved"):
        parse_completion(request, item)


def test_generate_req_input_normalises_every_body_the_client_sends():
    real_sglang.import_sglang()
    from sglang.srt.managers.io_struct import GenerateReqInput

    requests = [Request((5, 6, 7, 8, 9), 2, logprobs_from=3), Request((1, 2, 3), 1)]
    for batch in (requests, requests[:1]):
        req = GenerateReqInput(**generate_body(batch))
        req.normalize_batch_and_arguments()
        assert req.batch_size == len(batch)
        assert req.logprob_start_len == [max(r.logprobs_from, 1) - 1 for r in batch]
        assert all(p["temperature"] == 0.0 for p in req.sampling_params)


# -- SGLang's own client against det-suite serve ---------------------------------------------

def test_sglangs_own_deterministic_test_talks_to_det_suite_serve():
    """The wheel's test/test_deterministic.py (single mode: one text prompt in batches of
    1..n) against `det-suite serve`; a scripted backend stands in for the engine, so this
    proves the protocol, not determinism (docs/sglang.md: the run on the tiny engine)."""
    real_sglang.import_sglang()
    from sglang.test import test_deterministic as sglang_test

    from det_suite.backends.sglang.serve import EngineServer
    from tests.unit.backends.test_sglang_serve import Echoing, Tokens

    with EngineServer(Echoing(), vocab=50, model="scripted", tokenizer=Tokens(),
                      stops=(49,)) as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        args = sglang_test.BenchArgs(host=host, port=int(port), n_trials=3,
                                     max_new_tokens=4, test_mode="single")
        assert sglang_test.test_deterministic(args) == [1]
        full = sglang_test.send_single(dataclasses.replace(args, return_logprob=True),
                                       input_ids=[3, 4, 5], max_new_tokens=2,
                                       return_full_response=True)
    assert full["output_ids"] == [1, 1] and len(full["meta_info"]["output_token_logprobs"]) == 2


def test_sglangs_prefix_mode_gives_one_output_per_prompt_against_serve_on_the_tiny_engine():
    """The wheel's prefix mode (prompts sharing prefixes of 1, 511, 2048 and 4097 characters,
    random batches of up to n) against `det-suite serve` on synthetic:tiny: one unique
    output per prompt. Batches that hold several 4097-token prompts exceed the CPU default
    KV cache and run in waves. The stock op set serves it (torch on the CPU: det mode's
    Triton interpreter takes minutes over 4097-token prompts), so this proves the protocol
    and the server's batching; `test_cache_hit_against_serve...` proves det mode's bits."""
    import random

    real_sglang.import_sglang()
    from sglang.test import test_deterministic as sglang_test

    from det_suite.backends.sglang.serve import open_engine_server

    server = open_engine_server("synthetic:tiny?seed=0", mode="stock", device="cpu")
    try:
        with server:
            host, port = server.url.removeprefix("http://").rsplit(":", 1)
            args = sglang_test.BenchArgs(host=host, port=int(port), n_trials=5,
                                         max_new_tokens=4, test_mode="prefix")
            # The test draws each batch's prompts at random: seeded, every prompt is drawn
            # (an undrawn prompt reports 0 unique outputs).
            random.seed(0)
            assert sglang_test.test_deterministic(args) == [1, 1, 1, 1]
    finally:
        server.backend.close()
