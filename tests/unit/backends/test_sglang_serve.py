"""`det-suite serve`: the embedded engine behind SGLang's native API subset. Its answers, read
by det-suite's SGLang client, are the embedded backend's values; requests outside the
subset are refused, never served differently."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request

import pytest

from det_suite.backends.interface import Request
from det_suite.backends.sglang.client import SGLangClient, generate_body
from det_suite.backends.sglang.serve import BadRequest, EngineServer, generate, parse_body
from det_suite.checks.cache_hit import PRESETS, CacheHitSettings, EngineVariant, run_cache_hit

TINY = "synthetic:tiny?seed=0"
SMALL = dict(PRESETS["small"], modes=("det",), variants=(EngineVariant(),), batches=(2,),
             device="cpu", progress=None)


class Echoing:
    """A backend that answers each prompt with its own ids as logprobs (no engine)."""

    def generate(self, requests):
        from det_suite.backends.interface import Completion
        return [Completion(output_ids=(1,) * r.max_new_tokens,
                           logprobs=tuple(-float(t) for t in r.prompt_ids[r.logprobs_from:])
                           + (-0.5,) * r.max_new_tokens, cached_tokens=0) for r in requests]


def test_every_body_the_client_sends_parses_back_to_its_requests():
    requests = [Request((5, 6, 7, 8, 9), 2, logprobs_from=3), Request((1, 2, 3), 1)]
    asks = parse_body(generate_body(requests))
    assert [a.request for a in asks] == [requests[0], Request((1, 2, 3), 1, logprobs_from=1)]
    assert all(a.logprobs and not a.stop_at_eos for a in asks)


@pytest.mark.parametrize("change, match", [
    (lambda b: b["sampling_params"][0].update(temperature=0.7), "only greedy"),
    (lambda b: b["sampling_params"][0].update(top_p=0.9), "unknown field `top_p`"),
    (lambda b: b.update(top_logprobs_num=5), "unknown field `top_logprobs_num`"),
    (lambda b: b.update(stream=True), "does not stream"),
    (lambda b: b["sampling_params"][0].update(frequency_penalty=0.5), "no penalties"),
    (lambda b: b.update(text="hello"), "exactly one of input_ids and text"),
])
def test_a_request_outside_the_subset_is_refused_by_name(change, match):
    body = generate_body([Request((1, 2, 3), 1)])
    change(body)
    with pytest.raises(BadRequest, match=match):
        parse_body(body)


def test_the_last_vocabulary_id_is_echoed_as_sglang_does():
    (item,) = generate(Echoing(), 10, generate_body([Request((5, 9, 3), 1, logprobs_from=1)]))
    assert [e[1] for e in item["meta_info"]["input_token_logprobs"]] == [5, 0, 3]


class Tokens:
    """A tokenizer stand-in: a character per id."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % 50 for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(65 + i % 26) for i in ids)


def test_text_prompts_and_stopping_at_eos_answer_as_sglang_does():
    """What SGLang's test_deterministic.py sends: text, penalties 0, a seed, no ignore_eos."""
    body = {"text": ["ab", "abc"], "stream": False, "return_logprob": False,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 3, "sampling_seed": 42,
                                "frequency_penalty": 0.0, "presence_penalty": 0.0}}

    class StopsSecond(Echoing):
        def generate(self, requests):
            from det_suite.backends.interface import Completion
            return [Completion(output_ids=(4, 7, 9), logprobs=(-1.0,) * (
                len(r.prompt_ids) - r.logprobs_from + 3), cached_tokens=0) for r in requests]
    items = generate(StopsSecond(), 50, body, tokenizer=Tokens(), stops=(7,))
    assert [i["output_ids"] for i in items] == [[4, 7], [4, 7]]
    assert items[0]["meta_info"]["finish_reason"] == {"type": "stop", "matched": 7}
    assert items[0]["text"] == "EH" and "input_token_logprobs" not in items[0]["meta_info"]


def _refused(backend, body) -> tuple[int, bytes]:
    """(HTTP status, body) of a /generate the server refuses."""
    with EngineServer(backend, vocab=50, model="stand-in") as server:
        req = urllib.request.Request(server.url + "/generate", data=json.dumps(body).encode(),
                                     method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req)
        return err.value.code, err.value.read()


def test_http_400_names_the_refused_field():
    body = generate_body([Request((1, 2), 1)])
    body["sampling_params"][0]["top_k"] = 5
    status, text = _refused(Echoing(), body)
    assert status == 400 and b"top_k" in text


class SmallCache(Echoing):
    """A backend whose KV cache holds `tokens` prompt tokens per batch (the engine's error)."""

    def __init__(self, tokens):
        self.tokens, self.batches = tokens, []

    def generate(self, requests):
        from det_suite.engine.prefix_cache import CacheFullError

        if sum(len(r.prompt_ids) for r in requests) > self.tokens:
            raise CacheFullError("the KV cache needs more pages")
        self.batches.append(len(requests))
        return super().generate(requests)


def test_a_batch_the_kv_cache_cannot_hold_runs_in_waves_as_sglang_queues_it():
    body = generate_body([Request((t, t + 1, t + 2), 1, logprobs_from=1) for t in range(5)])
    backend = SmallCache(tokens=6)
    assert generate(backend, 50, body) == generate(Echoing(), 50, body)
    assert backend.batches == [2, 1, 2]  # 5 fails, then halves until each wave fits


def test_a_prompt_no_wave_can_hold_and_an_engine_input_error_are_http_400():
    status, text = _refused(SmallCache(tokens=2), generate_body([Request((1, 2, 3), 1)]))
    assert status == 400 and b"--num-pages" in text

    class Refusing(Echoing):
        def generate(self, requests):
            raise ValueError("requests[0]: prompt (3) + max_new_tokens (1) = 4 exceeds the "
                             "engine's max_seq_len 3")

    with pytest.raises(BadRequest, match="max_seq_len"):
        generate(Refusing(), 50, generate_body([Request((1, 2, 3), 1)]))


@pytest.mark.model
def test_cache_hit_against_serve_gives_what_the_embedded_backend_gives(kernel_device):
    from det_suite.checks.cache_hit import FACTORIES

    settings = CacheHitSettings(**{**SMALL, "device": kernel_device})
    direct = run_cache_hit(settings)
    make, vocab, _ = FACTORIES["embedded"](settings)
    backend = make("det", settings.variants[0])
    with EngineServer(backend, vocab=vocab, model=TINY) as server:
        assert SGLangClient(server.url).healthy()
        over_http = run_cache_hit(dataclasses.replace(settings, backend="sglang",
                                                      server_url=server.url))
    backend.close()
    keep = ("phase", "cached_tokens", "cold_logprobs", "other_logprobs", "cold_ids",
            "other_ids", "exact")
    assert over_http.comparisons and [{k: getattr(c, k) for k in keep}
                                      for c in over_http.comparisons] == \
        [{k: getattr(c, k) for k in keep} for c in direct.comparisons]
    assert all(c.cached_tokens > 0 for c in over_http.comparisons if c.phase != "cold")
    # The attached server's parallelism, read from its /server_info, is in the result.
    assert list(over_http.parallel.values()) == [{"tp_size": 1, "dp_size": 1}]
