"""SGLang's native HTTP API, the part a check needs: `/generate` with logprobs,
`/flush_cache`, `/health`, `/health_generate`, `/model_info`.

A batch of `Request`s is one `/generate` body (input_ids as a list of lists), greedy
(temperature 0) with a forced length (ignore_eos, max_new_tokens). Logprob positions are
SGLang's, read from the 0.5.23 wheel: with `logprob_start_len = s` the response's
`meta_info.input_token_logprobs` holds `[logprob, token_id, text]` for prompt positions
s..L-1, the first always `None` (a position is scored from the one before it). det-suite's
`Request.logprobs_from = f` asks for positions max(f, 1).., so s = max(f, 1) - 1 and the
leading `None` is dropped; SGLang then also caches at most s prompt tokens, the embedded
engine's limit. Every token id SGLang echoes is checked against the prompt and the output,
so a shifted window is an error, not a silent mismatch. `cached_tokens` comes from
`meta_info`.

Retries only where a repeat cannot change what is measured: health and info reads, and
`/flush_cache` (idempotent). A `/generate` is never repeated: a half-served request may
have filled the prefix cache, and the repeat would measure a different thing.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Sequence
from urllib.parse import urlencode, urlsplit

from det_suite.backends.interface import Completion, Request

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class SGLangError(RuntimeError):
    """A request to an SGLang server failed, or its answer is not what was asked for."""


class SGLangConnectionError(SGLangError):
    pass


class SGLangHTTPError(SGLangError):
    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        self.status, self.body = status, body
        super().__init__(f"{method} {url}: HTTP {status}: {body.strip()[:2000] or '(empty)'}")


class SGLangResponseError(SGLangError):
    pass


# -- request bodies and responses (pure) -------------------------------------------------------

def logprob_start_len(request: Request) -> int:
    return max(request.logprobs_from, 1) - 1


def sampling_params(request: Request) -> dict:
    return {"max_new_tokens": request.max_new_tokens, "temperature": 0.0, "ignore_eos": True}


def _check_request(request, index: int) -> None:
    name = f"requests[{index}]"
    if not isinstance(request, Request):
        raise TypeError(f"{name}: expected a det_suite Request, got {type(request).__name__}")
    prompt = request.prompt_ids
    if not prompt or any(isinstance(t, bool) or not isinstance(t, int) or t < 0
                         for t in prompt):
        raise ValueError(f"{name}.prompt_ids: expected one or more ints >= 0, got "
                         f"{tuple(prompt)[:5]!r}")
    if isinstance(request.max_new_tokens, bool) or not isinstance(request.max_new_tokens, int) \
            or request.max_new_tokens < 1:
        raise ValueError(f"{name}.max_new_tokens: expected an int >= 1, got "
                         f"{request.max_new_tokens!r}")
    if not isinstance(request.logprobs_from, int) or not 0 <= request.logprobs_from <= len(prompt):
        raise ValueError(f"{name}.logprobs_from: expected an int in [0, {len(prompt)}], got "
                         f"{request.logprobs_from!r}")


def generate_body(requests: Sequence[Request]) -> dict:
    """The `/generate` JSON body for one batch."""
    if not requests:
        raise ValueError("requests: expected at least one request")
    for index, request in enumerate(requests):
        _check_request(request, index)
    return {"input_ids": [list(r.prompt_ids) for r in requests],
            "sampling_params": [sampling_params(r) for r in requests],
            "return_logprob": True,
            "logprob_start_len": [logprob_start_len(r) for r in requests],
            "return_text_in_logprobs": False}


def _entries(meta: dict, key: str, where: str) -> list:
    entries = meta.get(key)
    if not isinstance(entries, list) or any(
            not isinstance(e, (list, tuple)) or len(e) < 2 for e in entries):
        raise SGLangResponseError(f"{where}: meta_info.{key} is not a list of "
                                  f"[logprob, token_id, text] entries: {entries!r:.200}")
    return entries


def echoed_ids(prompt: Sequence[int], vocab_size: int | None) -> list[int]:
    """The prompt ids as SGLang echoes them in input_token_logprobs. Its logprob processor
    (0.5.23, logprob_result_processor.py) prints every id >= vocab_size - 1 as 0, a clip
    meant for multimodal hash ids; the logprob beside it is still the real token's (the
    scored ids are clamped to vocab_size - 1, which leaves vocab_size - 1 itself alone)."""
    if vocab_size is None:
        return list(prompt)
    return [t if t < vocab_size - 1 else 0 for t in prompt]


def parse_completion(request: Request, item: dict, index: int = 0, *,
                     vocab_size: int | None = None) -> Completion:
    """One element of a `/generate` response, checked against the request it answers.
    `vocab_size`: the model's, so SGLang's echo of id vocab_size - 1 as 0 is expected;
    without it a prompt holding that id fails the window check."""
    where = f"response[{index}]"
    if not isinstance(item, dict) or not isinstance(item.get("meta_info"), dict):
        raise SGLangResponseError(f"{where}: expected an object with meta_info, got "
                                  f"{item!r:.200}")
    meta = item["meta_info"]
    output_ids = item.get("output_ids")
    if not isinstance(output_ids, list) or len(output_ids) != request.max_new_tokens:
        raise SGLangResponseError(
            f"{where}: {len(output_ids) if isinstance(output_ids, list) else output_ids!r} "
            f"generated tokens, expected exactly {request.max_new_tokens} (finish_reason "
            f"{meta.get('finish_reason')!r}; is the context long enough?)")
    start = logprob_start_len(request)
    prompt = list(request.prompt_ids)
    inputs = _entries(meta, "input_token_logprobs", where)
    outputs = _entries(meta, "output_token_logprobs", where)
    expected = echoed_ids(prompt[start:], vocab_size)
    if [e[1] for e in inputs] != expected:
        raise SGLangResponseError(
            f"{where}: input_token_logprobs name tokens {[e[1] for e in inputs][:8]}..., "
            f"expected the prompt from position {start} as SGLang echoes it: {expected[:8]}... "
            "(SGLang's logprob window moved?" + (")" if vocab_size is not None else
                                                  "; or no vocab_size was given and the "
                                                  "prompt holds vocab_size - 1)"))
    if inputs[0][0] is not None or any(e[0] is None for e in inputs[1:]):
        raise SGLangResponseError(f"{where}: expected None only at the first of the "
                                  f"input_token_logprobs (position {start}), got "
                                  f"{[e[0] for e in inputs][:4]}...")
    if [e[1] for e in outputs] != output_ids or any(e[0] is None for e in outputs):
        raise SGLangResponseError(f"{where}: output_token_logprobs do not match output_ids "
                                  f"{output_ids[:8]}...")
    cached = meta.get("cached_tokens")
    if isinstance(cached, bool) or not isinstance(cached, int) or cached < 0:
        raise SGLangResponseError(f"{where}: meta_info.cached_tokens is {cached!r}, expected "
                                  "an int >= 0")
    return Completion(output_ids=tuple(output_ids),
                      logprobs=tuple(float(e[0]) for e in inputs[1:] + outputs),
                      cached_tokens=cached)


def parse_generate(requests: Sequence[Request], payload, *,
                   vocab_size: int | None = None) -> list[Completion]:
    items = payload if isinstance(payload, list) else [payload]
    if len(items) != len(requests):
        raise SGLangResponseError(f"/generate answered {len(items)} items for "
                                  f"{len(requests)} requests")
    return [parse_completion(r, item, i, vocab_size=vocab_size)
            for i, (r, item) in enumerate(zip(requests, items))]


# -- the client --------------------------------------------------------------------------------

class SGLangClient:
    """`url`: http(s)://host:port of a running server. `timeout`: seconds per request.
    `vocab_size`: the served model's (see `parse_completion`)."""

    def __init__(self, url: str, *, timeout: float = 600.0, retries: int = 3,
                 backoff: float = 1.0, vocab_size: int | None = None) -> None:
        parts = urlsplit(url if isinstance(url, str) else "")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url: expected http://HOST:PORT, got {url!r}")
        if not timeout > 0 or retries < 0:
            raise ValueError(f"timeout/retries: expected timeout > 0 and retries >= 0, got "
                             f"{timeout!r}/{retries!r}")
        self.url = url.rstrip("/")
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.vocab_size = vocab_size
        # A proxy configured for the outside world must not swallow a local server.
        handlers = [urllib.request.ProxyHandler({})] if parts.hostname in LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)

    def _call(self, method: str, path: str, body=None, *, timeout: float | None = None,
              query: dict | None = None) -> bytes:
        url = self.url + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with self._opener.open(req, timeout=timeout or self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            raise SGLangHTTPError(method, url, exc.code,
                                  exc.read().decode(errors="replace")) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SGLangConnectionError(f"{method} {url}: {reason}") from None

    def _retrying(self, call, *, retry_on=(SGLangConnectionError,)):
        for attempt in range(self.retries + 1):
            try:
                return call()
            except retry_on:
                if attempt == self.retries:
                    raise
                time.sleep(self.backoff * (attempt + 1))

    def _json(self, method: str, path: str, body=None, **kw):
        raw = self._call(method, path, body, **kw)
        try:
            return json.loads(raw)
        except ValueError:
            raise SGLangResponseError(f"{method} {self.url}{path}: not JSON: "
                                      f"{raw[:200]!r}") from None

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        body = generate_body(requests)
        return parse_generate(requests, self._json("POST", "/generate", body),
                              vocab_size=self.vocab_size)

    def flush_cache(self, wait: float = 60.0) -> None:
        """Empty the prefix cache. SGLang refuses (HTTP 400) while requests run; `wait` lets
        it wait that long for idle before refusing."""
        self._retrying(lambda: self._call("POST", "/flush_cache", query={"timeout": wait},
                                          timeout=wait + self.timeout),
                       retry_on=(SGLangConnectionError, SGLangHTTPError))

    def healthy(self) -> bool:
        """GET /health: 200 once the server serves (503 while it starts)."""
        try:
            self._call("GET", "/health", timeout=min(self.timeout, 30.0))
            return True
        except SGLangError:
            return False

    def health_generate(self) -> None:
        """GET /health_generate: the server generates one token (raises when it cannot)."""
        self._retrying(lambda: self._call("GET", "/health_generate"))

    def model_info(self) -> dict:
        return self._retrying(lambda: self._json("GET", "/model_info"))

    def server_info(self) -> dict:
        return self._retrying(lambda: self._json("GET", "/server_info"))
