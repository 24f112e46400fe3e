"""The SGLang HTTP client against a local http.server (no network): the /generate body it
builds, how it reads a response shaped like SGLang 0.5.23's (meta_info fields and logprob
positions read from the wheel), what it refuses, and which calls it retries."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from det_suite.backends.interface import Completion, Request
from det_suite.backends.sglang.client import (SGLangClient, SGLangConnectionError,
                                              SGLangHTTPError, SGLangResponseError,
                                              generate_body, parse_completion)


class LocalServer:
    """A loopback HTTP server: `routes[(method, path)](query, body) -> (status, payload)`;
    every request is recorded in `seen` as (method, path, query, body)."""

    def __init__(self, routes):
        self.routes, self.seen = dict(routes), []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self, method):
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                owner.seen.append((method, parts.path, query, body))
                route = owner.routes.get((method, parts.path))
                status, payload = route(query, body) if route else (404, "no route")
                data = payload.encode() if isinstance(payload, str) else \
                    json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def sglang_item(request: Request, *, output_ids, input_lps, output_lps, cached: int) -> dict:
    """One element of a /generate answer as SGLang 0.5.23 builds it (tokenizer_manager:
    text, output_ids, meta_info; logprob entries [logprob, token_id, None] from position
    logprob_start_len, the first None)."""
    start = max(request.logprobs_from, 1) - 1
    prompt = list(request.prompt_ids)
    assert len(input_lps) == len(prompt) - start - 1
    return {
        "text": "decoded text",
        "output_ids": list(output_ids),
        "meta_info": {
            "id": "6f0c", "finish_reason": {"type": "length", "length": len(output_ids)},
            "prompt_tokens": len(prompt), "weight_version": "default", "num_retractions": 0,
            "input_token_logprobs": [[None, prompt[start], None]] + [
                [lp, tok, None] for lp, tok in zip(input_lps, prompt[start + 1:])],
            "output_token_logprobs": [[lp, tok, None] for lp, tok in zip(output_lps,
                                                                          output_ids)],
            "reasoning_tokens": 0, "completion_tokens": len(output_ids),
            "cached_tokens": cached, "e2e_latency": 0.01,
        },
    }


REQUESTS = [Request((5, 6, 7, 8, 9), 2, logprobs_from=3),
            Request((1, 2, 3), 1, logprobs_from=0)]


def recorded_answer(requests=REQUESTS):
    return [sglang_item(requests[0], output_ids=[11, 12], input_lps=[-0.5, -0.25],
                        output_lps=[-1.0, -2.0], cached=2),
            sglang_item(requests[1], output_ids=[4], input_lps=[-3.0, -4.0],
                        output_lps=[-5.0], cached=0)]


# -- the body --------------------------------------------------------------------------------

def test_generate_body_asks_greedy_forced_length_logprobs_from_each_window():
    body = generate_body(REQUESTS + [Request((1, 2), 3, logprobs_from=1)])
    assert body == {
        "input_ids": [[5, 6, 7, 8, 9], [1, 2, 3], [1, 2]],
        "sampling_params": [{"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}
                            for n in (2, 1, 3)],
        "return_logprob": True,
        # SGLang leaves the first position of the window unscored: start one before.
        "logprob_start_len": [2, 0, 0],
        "return_text_in_logprobs": False,
    }


@pytest.mark.parametrize("request_, match", [
    pytest.param(Request((), 1), r"requests\[0\].prompt_ids", id="empty-prompt"),
    pytest.param(Request((1, -2), 1), r"requests\[0\].prompt_ids", id="negative-id"),
    pytest.param(Request((1, 2), 0), r"requests\[0\].max_new_tokens", id="zero-new-tokens"),
    pytest.param(Request((1, 2), 1, logprobs_from=3), r"requests\[0\].logprobs_from",
                 id="window-past-the-prompt"),
])
def test_bad_requests_are_refused_by_name(request_, match):
    with pytest.raises(ValueError, match=match):
        generate_body([request_])


# -- the answer ------------------------------------------------------------------------------

def test_a_recorded_shape_answer_becomes_completions():
    with LocalServer({("POST", "/generate"): lambda q, b: (200, recorded_answer())}) as srv:
        completions = SGLangClient(srv.url).generate(REQUESTS)
    assert completions == [
        Completion(output_ids=(11, 12), logprobs=(-0.5, -0.25, -1.0, -2.0), cached_tokens=2),
        Completion(output_ids=(4,), logprobs=(-3.0, -4.0, -5.0), cached_tokens=0)]
    ((method, path, _, body),) = srv.seen
    assert (method, path, body) == ("POST", "/generate", generate_body(REQUESTS))


def _shift_window(item):
    entries = item["meta_info"]["input_token_logprobs"]
    entries[1:] = [[lp, tok + 1, t] for lp, tok, t in entries[1:]]


def _score_the_first(item):
    item["meta_info"]["input_token_logprobs"][0][0] = -0.1


def _stop_early(item):
    item["output_ids"].pop()
    item["meta_info"]["output_token_logprobs"].pop()


def _no_cached_tokens(item):
    del item["meta_info"]["cached_tokens"]


def _outputs_disagree(item):
    item["meta_info"]["output_token_logprobs"][0][1] = 99


@pytest.mark.parametrize("spoil, match", [
    pytest.param(_shift_window, "logprob window moved", id="window-shifted"),
    pytest.param(_score_the_first, "None only at the first", id="first-position-scored"),
    pytest.param(_stop_early, "expected exactly 2", id="stopped-before-max-new-tokens"),
    pytest.param(_no_cached_tokens, "cached_tokens", id="no-cached-tokens"),
    pytest.param(_outputs_disagree, "do not match output_ids", id="output-ids-disagree"),
])
def test_an_answer_that_does_not_fit_its_request_is_an_error(spoil, match):
    item = recorded_answer()[0]
    spoil(item)
    with pytest.raises(SGLangResponseError, match=match):
        parse_completion(REQUESTS[0], item)


def test_an_answer_with_the_wrong_count_is_an_error():
    with LocalServer({("POST", "/generate"): lambda q, b: (200, recorded_answer()[:1])}) as srv:
        with pytest.raises(SGLangResponseError, match="1 items for 2 requests"):
            SGLangClient(srv.url).generate(REQUESTS)


# -- errors and retries ----------------------------------------------------------------------

def test_a_refused_generate_is_reported_and_not_repeated():
    refusal = {"error": "sampling_params: unknown field `top_z`"}
    with LocalServer({("POST", "/generate"): lambda q, b: (400, refusal)}) as srv:
        with pytest.raises(SGLangHTTPError, match="HTTP 400.*top_z") as info:
            SGLangClient(srv.url, retries=3, backoff=0).generate(REQUESTS)
    assert info.value.status == 400 and len(srv.seen) == 1


def test_flush_cache_asks_the_server_to_wait_for_idle():
    with LocalServer({("POST", "/flush_cache"): lambda q, b: (200, "Cache flushed.\n")}) as srv:
        SGLangClient(srv.url).flush_cache(wait=12.5)
    assert [(m, p, q) for m, p, q, _ in srv.seen] == [("POST", "/flush_cache",
                                                       {"timeout": "12.5"})]


def test_a_refused_flush_is_retried_then_reported_with_the_server_text():
    busy = "Timed out waiting for idle state."
    with LocalServer({("POST", "/flush_cache"): lambda q, b: (400, busy)}) as srv:
        with pytest.raises(SGLangHTTPError, match="Timed out waiting for idle"):
            SGLangClient(srv.url, retries=2, backoff=0).flush_cache(wait=0.1)
    assert len(srv.seen) == 3


@pytest.mark.parametrize("status, healthy", [pytest.param(200, True, id="up"),
                                             pytest.param(503, False, id="starting")])
def test_health(status, healthy):
    with LocalServer({("GET", "/health"): lambda q, b: (status, "")}) as srv:
        assert SGLangClient(srv.url).healthy() is healthy


def test_no_server_is_a_connection_error_naming_the_url():
    with LocalServer({}) as srv:
        url = srv.url
    client = SGLangClient(url, retries=0)
    assert client.healthy() is False
    with pytest.raises(SGLangConnectionError, match=f"POST {url}/generate"):
        client.generate(REQUESTS)


@pytest.mark.parametrize("url", ["localhost:30000", "ftp://host:1", ""])
def test_a_bad_url_is_refused(url):
    with pytest.raises(ValueError, match="url: expected http"):
        SGLangClient(url)


# -- SGLang's echo of the last vocabulary id ---------------------------------------------------

def _echo_last_id_as_zero(item, vocab):
    for entry in item["meta_info"]["input_token_logprobs"]:
        entry[1] = entry[1] if entry[1] < vocab - 1 else 0


def test_the_last_vocabulary_id_echoed_as_zero_is_expected_given_the_vocab():
    """SGLang 0.5.23 echoes prompt ids >= vocab_size - 1 as 0; their logprobs are kept."""
    request = Request((5, 9, 6, 9), 1, logprobs_from=1)
    item = sglang_item(request, output_ids=[3], input_lps=[-1.0, -2.0, -3.0],
                       output_lps=[-4.0], cached=0)
    _echo_last_id_as_zero(item, vocab=10)
    assert [e[1] for e in item["meta_info"]["input_token_logprobs"]] == [5, 0, 6, 0]
    done = parse_completion(request, item, vocab_size=10)
    assert done.logprobs == (-1.0, -2.0, -3.0, -4.0)


def test_without_the_vocab_the_echoed_zero_is_a_moved_window():
    request = Request((5, 9), 1, logprobs_from=1)
    item = sglang_item(request, output_ids=[3], input_lps=[-1.0], output_lps=[-2.0], cached=0)
    _echo_last_id_as_zero(item, vocab=10)
    with pytest.raises(SGLangResponseError, match="no vocab_size was given"):
        parse_completion(request, item)


def test_a_zero_where_the_prompt_holds_any_other_id_still_fails_with_the_vocab():
    """Only vocab_size - 1 is echoed as 0: every other id (1 .. vocab_size - 2) must match."""
    failed = 0
    for token in range(1, 9):
        request = Request((5, token), 1, logprobs_from=1)
        item = sglang_item(request, output_ids=[3], input_lps=[-1.0], output_lps=[-2.0],
                           cached=0)
        item["meta_info"]["input_token_logprobs"][1][1] = 0
        with pytest.raises(SGLangResponseError, match="window moved"):
            parse_completion(request, item, vocab_size=10)
        failed += 1
    assert failed == 8


# -- against the real SGLang -----------------------------------------------------------------

@pytest.mark.sglang
def test_every_body_passes_sglangs_own_contract_check():
    from tests.unit.backends import real_sglang
    real_sglang.import_sglang()
    # The contract module came after 0.5.18 (the extra's floor): not run there.
    contract = pytest.importorskip("sglang.srt.entrypoints.api_contract",
                                   reason="this sglang has no request contract module")
    generate_contract_error = contract.generate_contract_error

    for requests in (REQUESTS, REQUESTS[:1], [Request((1,), 4, logprobs_from=0)]):
        assert generate_contract_error(generate_body(requests)) is None
    assert generate_contract_error({"input_ids": [[1]], "sampling_params": [{"top_z": 1}]})
