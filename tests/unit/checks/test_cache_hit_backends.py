"""The cache-hit check on any backend `open_backend` knows: settings and CLI validation, and
the sglang backend end to end over HTTP against the embedded engine served through the
subset of SGLang's native API the client uses (/generate with SGLang's logprob window and
meta_info, /flush_cache, /health): the same matrix gives the same values, ids and cached
tokens as the embedded backend called directly, and the report proves every hit."""

import dataclasses
import json

import pytest

from det_suite.backends.interface import Request
from det_suite.backends.open import open_backend
from det_suite.backends.sglang.backend import SGLangBackend
from det_suite.checks.cache_hit import PRESETS, CacheHitSettings, EngineVariant, run_cache_hit
from det_suite.cli import build_parser
from det_suite.commands.cache_hit import settings_from_args
from tests.unit.backends.test_sglang_client import LocalServer

TINY = "synthetic:tiny?seed=0"
SAMPLING_KEYS = {"max_new_tokens", "temperature", "ignore_eos"}


def engine_routes(backend):
    """An embedded backend behind SGLang's native endpoints, SGLang's conventions kept: a
    window starting at logprob_start_len whose first entry is None, unknown sampling keys
    refused with 400, ids >= vocab_size - 1 echoed as 0 (its logprob processor's clip)."""
    from det_suite.backends.sglang.backend import model_vocab
    vocab = model_vocab(TINY)

    def echo(t):
        return t if t < vocab - 1 else 0

    def generate(query, body):
        params = body["sampling_params"]
        unknown = {k for p in params for k in p} - SAMPLING_KEYS
        if unknown:
            return 400, {"error": f"unknown field `{sorted(unknown)[0]}`"}
        if not all(p["temperature"] == 0.0 and p["ignore_eos"] for p in params):
            return 400, {"error": "the stand-in only serves greedy, forced-length requests"}
        starts = body["logprob_start_len"]
        requests = [Request(tuple(ids), p["max_new_tokens"], logprobs_from=start + 1)
                    for ids, p, start in zip(body["input_ids"], params, starts)]
        items = []
        for request, start, done in zip(requests, starts, backend.generate(requests)):
            prompt, scored = request.prompt_ids, len(request.prompt_ids) - start - 1
            items.append({"text": "", "output_ids": list(done.output_ids), "meta_info": {
                "prompt_tokens": len(prompt), "completion_tokens": len(done.output_ids),
                "cached_tokens": done.cached_tokens,
                "input_token_logprobs": [[None, echo(prompt[start]), None]] + [
                    [lp, echo(t), None]
                    for lp, t in zip(done.logprobs[:scored], prompt[start + 1:])],
                "output_token_logprobs": [[lp, t, None] for lp, t in
                                          zip(done.logprobs[scored:], done.output_ids)]}})
        return 200, items

    def flush(query, body):
        backend.flush_cache()
        return 200, "Cache flushed.\n"

    return {("POST", "/generate"): generate, ("POST", "/flush_cache"): flush,
            ("GET", "/health"): lambda q, b: (200, ""),
            ("GET", "/health_generate"): lambda q, b: (200, "")}


SMALL = dict(PRESETS["small"], modes=("stock",), variants=(EngineVariant(),), batches=(2,),
             device="cpu", progress=None)


def embedded_like_the_check(settings):
    """The embedded backend exactly as the check's own factory builds it."""
    from det_suite.checks.cache_hit import FACTORIES
    make, _, _ = FACTORIES["embedded"](settings)
    return make(settings.modes[0], settings.variants[0])


@pytest.mark.model
def test_cache_hit_over_http_gives_what_the_embedded_backend_gives():
    direct = run_cache_hit(CacheHitSettings(**SMALL))
    settings = CacheHitSettings(**SMALL)
    served = embedded_like_the_check(settings)
    with LocalServer(engine_routes(served)) as srv:
        over_http = run_cache_hit(dataclasses.replace(settings, backend="sglang",
                                                      server_url=srv.url))
    served.close()
    keep = ("phase", "cached_tokens", "cold_logprobs", "other_logprobs", "cold_ids",
            "other_ids", "exact")
    assert [{k: getattr(c, k) for k in keep} for c in over_http.comparisons] == \
        [{k: getattr(c, k) for k in keep} for c in direct.comparisons]
    assert over_http.comparisons and all(c.cached_tokens > 0 for c in over_http.comparisons)
    assert over_http.settings["server_url"] == srv.url


@pytest.mark.model
def test_cli_runs_the_check_against_a_server_url_and_reports_the_hits(tmp_path, capsys):
    from det_suite.cli import main

    settings = CacheHitSettings(**{**SMALL, "batches": (1,)})
    served = embedded_like_the_check(settings)
    with LocalServer(engine_routes(served)) as srv:
        code = main(["cache-hit", "--backend", "sglang", "--server-url", srv.url,
                     "--modes", "stock", "--engines", "eager", "--model", TINY,
                     "--preset", "small", "--batches", "1", "--out", str(tmp_path)])
    served.close()
    payload = json.loads((tmp_path / "cache_hit.json").read_text())
    rows = payload["comparisons"]
    assert code == 0 and rows and all(r["cached_tokens"] > 0 for r in rows)
    assert payload["settings"]["backend"] == "sglang"
    assert f"on sglang at {srv.url}" in capsys.readouterr().out


def test_the_result_records_each_arms_routing_counts_and_parallelism(tmp_path):
    from det_suite.checks.cache_hit_report import verdict_lines, write_report

    settings = CacheHitSettings(**{**SMALL, "batches": (1,)})
    counts = {"det_suite": 28, "upstream": 0, "reasons": {}, "processes": 2}
    sizes = {"tp_size": 2, "dp_size": 1}

    def make(mode, variant):
        backend = embedded_like_the_check(settings)
        backend.routing = counts  # what SGLangBackend reports for a det arm it booted
        backend.parallel = sizes  # and the parallelism it launched with
        return backend
    result = run_cache_hit(settings, backend_factory=make, vocab=259)
    assert result.routing == {"stock/eager": counts}
    assert result.parallel == {"stock/eager": sizes}
    lines = verdict_lines(result)
    assert "routing stock/eager: 28 linear layers to det-suite, 0 upstream" in lines
    assert "parallelism stock/eager: tensor parallel 2, data parallel 1" in lines
    write_report(result, tmp_path)
    payload = json.loads((tmp_path / "cache_hit.json").read_text())
    assert (payload["routing"], payload["parallel"]) == (result.routing, result.parallel)


def test_cli_exits_2_when_the_det_arm_routed_nothing(tmp_path, capsys, monkeypatch):
    """A det arm whose plugin routed no layer measured nothing det-suite vouches for: an
    environment error, not a verdict."""
    from det_suite.backends.sglang.server import SGLangRoutingError
    from det_suite.checks import cache_hit
    from det_suite.cli import main

    def det_arm_ran_upstream(settings):
        raise SGLangRoutingError("det arm ran upstream kernels: no ModelOpt FP8 linear layer "
                                 "was routed to det-suite")
    monkeypatch.setattr(cache_hit, "run_cache_hit", det_arm_ran_upstream)
    code = main(["cache-hit", "--backend", "sglang", "--model", TINY, "--preset", "small",
                 "--out", str(tmp_path)])
    assert code == 2 and "det arm ran upstream kernels" in capsys.readouterr().err
    assert not (tmp_path / "cache_hit.json").exists()


# -- open_backend's sglang branch --------------------------------------------------------------

def test_open_backend_attaches_to_a_running_server():
    with LocalServer({("GET", "/health"): lambda q, b: (200, "")}) as srv:
        backend = open_backend("sglang", TINY, mode="stock", url=srv.url)
        assert isinstance(backend, SGLangBackend) and backend.server is None
        assert backend.name == f"sglang:stock@{srv.url}"
        assert backend.parallel == {"tp_size": None, "dp_size": None}  # /server_info: 404
        backend.close()   # a server it did not start is left running
    assert [path for _, path, _, _ in srv.seen] == ["/health", "/server_info"]


def test_an_attached_servers_parallelism_is_what_its_server_info_says():
    info = {"tp_size": 2, "dp_size": 4, "model_path": "m"}
    with LocalServer({("GET", "/health"): lambda q, b: (200, ""),
                      ("GET", "/server_info"): lambda q, b: (200, info)}) as srv:
        backend = open_backend("sglang", TINY, mode="det", url=srv.url)
        assert backend.parallel == {"tp_size": 2, "dp_size": 4}
        backend.close()


@pytest.mark.parametrize("options, match", [
    pytest.param({"checkpoint": object()}, "checkpoint", id="loaded-checkpoint"),
    pytest.param({"device": "cpu"}, "device", id="cpu-device"),
    pytest.param({"mode": "fast"}, "mode", id="unknown-mode"),
    pytest.param({"url": "http://127.0.0.1:9", "attention_backend": "fa3"}, "url",
                 id="launch-option-with-a-url"),
])
def test_open_backend_sglang_refuses_by_name(options, match):
    with pytest.raises(ValueError, match=match):
        open_backend("sglang", TINY, **options)


# -- settings and the command line -------------------------------------------------------------

@pytest.mark.parametrize("overrides, match", [
    pytest.param({"backend": "vllm"}, "backend", id="unknown-backend"),
    pytest.param({"server_url": "http://h:1"}, "only the sglang backend",
                 id="server-url-on-embedded"),
    pytest.param({"backend": "sglang", "server_url": "h:1", "modes": ("det",)},
                 "http://HOST:PORT", id="server-url-without-scheme"),
    pytest.param({"backend": "sglang", "server_url": "http://h:1", "modes": ("det", "stock")},
                 "one mode and one engine", id="server-url-two-modes"),
    pytest.param({"backend": "sglang", "server_url": "http://h:1", "modes": ("det",),
                  "variants": (EngineVariant(), EngineVariant(True))},
                 "one mode and one engine", id="server-url-two-engines"),
])
def test_bad_backend_settings_are_refused_by_name(overrides, match):
    with pytest.raises(ValueError, match=match):
        CacheHitSettings(**{**SMALL, **overrides})


def _settings(*argv):
    return settings_from_args(build_parser().parse_args(["cache-hit", *argv]))


def test_cli_launch_options_reach_the_backend():
    s = _settings("--backend", "sglang", "--model", "Qwen/Qwen3-8B-FP8", "--out", "res",
                  "--attention-backend", "fa3", "--server-arg=--mem-fraction-static=0.8",
                  "--health-timeout", "60", "--engines", "graph,eager-chunk256",
                  "--tp-size", "2", "--dp-size", "2")
    assert s.backend == "sglang" and s.server_url is None and s.modes == ("det", "stock")
    assert s.backend_options == {"work_dir": "res/sglang", "attention_backend": "fa3",
                                 "tp_size": 2, "dp_size": 2,
                                 "extra_args": ("--mem-fraction-static=0.8",),
                                 "health_timeout": 60.0}
    assert s.variants == (EngineVariant(cuda_graph=True), EngineVariant(chunk_size=256))
    assert s.prefixes == PRESETS["full"]["prefixes"]   # the server has the GPU


def test_cli_server_url_takes_the_named_arm_and_one_graph_engine():
    s = _settings("--backend", "sglang", "--server-url", "http://127.0.0.1:30000",
                  "--modes", "det")
    assert (s.server_url, s.modes, s.variants) == ("http://127.0.0.1:30000", ("det",),
                                                   (EngineVariant(cuda_graph=True),))
    assert s.backend_options == {}


@pytest.mark.parametrize("argv, match", [
    pytest.param(["--backend", "sglang", "--server-url", "http://h:1"], "--modes",
                 id="server-url-without-its-arm"),
    pytest.param(["--backend", "sglang", "--server-url", "http://h:1", "--modes", "det",
                  "--attention-backend", "fa3"], "--attention-backend",
                 id="launch-option-with-a-server-url"),
    pytest.param(["--server-url", "http://h:1", "--modes", "det"], "--server-url",
                 id="server-url-on-embedded"),
    pytest.param(["--server-arg=--x"], "--server-arg", id="launch-option-on-embedded"),
    pytest.param(["--tp-size", "2"], "--tp-size", id="tensor-parallel-on-embedded"),
])
def test_cli_refuses_options_that_mean_nothing_here(argv, match):
    with pytest.raises(ValueError, match=match):
        _settings(*argv)
