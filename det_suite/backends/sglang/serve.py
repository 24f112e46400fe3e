"""The embedded engine behind the part of SGLang's native HTTP API the checks use:
`/generate` (batched input_ids, greedy, forced length, logprobs from logprob_start_len),
`/flush_cache`, `/health`, `/health_generate`, `/model_info`, `/server_info`; text prompts too when the model
has a tokenizer, and stopping at EOS, which SGLang's own `test/test_deterministic.py` sends.

SGLang's conventions are kept, so an SGLang client (det-suite's, or SGLang's own) cannot
tell the two apart on this subset: the input-logprob window starts at logprob_start_len
with a None first entry, prompt ids >= vocab_size - 1 are echoed as 0 (as SGLang 0.5.23's
logprob processor does), and a request outside the subset (sampling, unknown keys) is
refused with HTTP 400 naming the field, never served differently.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from det_suite.backends.interface import Request
from det_suite.errors import InputError

SAMPLING_KEYS = {"max_new_tokens", "temperature", "ignore_eos", "frequency_penalty",
                 "presence_penalty", "sampling_seed"}
BODY_KEYS = {"input_ids", "text", "sampling_params", "return_logprob", "logprob_start_len",
             "return_text_in_logprobs", "stream"}


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class Ask:
    """One prompt of a body: the engine request, and how SGLang would shape its answer."""

    request: Request
    stop_at_eos: bool       # ignore_eos false: the output ends before the first stop id
    logprobs: bool


def _as_list(value, count: int, name: str) -> list:
    if isinstance(value, list):
        if len(value) != count:
            raise BadRequest(f"{name}: {len(value)} entries for {count} prompts")
        return value
    return [value] * count


def _prompts(body, tokenizer) -> list[list[int]]:
    if ("input_ids" in body) == ("text" in body):
        raise BadRequest("expected exactly one of input_ids and text")
    if "text" in body:
        if tokenizer is None:
            raise BadRequest("text: this model has no tokenizer; send input_ids")
        texts = body["text"] if isinstance(body["text"], list) else [body["text"]]
        if not texts or not all(isinstance(t, str) and t for t in texts):
            raise BadRequest("text: expected a non-empty string or a list of them")
        return [list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    ids = body["input_ids"]
    if isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids):
        ids = [ids]
    if not isinstance(ids, list) or not ids or not all(
            isinstance(p, list) and p and all(isinstance(t, int) and t >= 0 for t in p)
            for p in ids):
        raise BadRequest("input_ids: expected token ids (a list, or a list of lists)")
    return ids


def parse_body(body, tokenizer=None) -> list[Ask]:
    """What one `/generate` body asks for; BadRequest outside the subset: greedy only
    (penalties 0; a sampling_seed means nothing at temperature 0 and is accepted), no
    streaming."""
    if not isinstance(body, dict):
        raise BadRequest("expected a JSON object")
    unknown = set(body) - BODY_KEYS
    if unknown:
        raise BadRequest(f"unknown field `{sorted(unknown)[0]}` (det-suite serve answers the "
                         f"subset {sorted(BODY_KEYS)})")
    if body.get("stream", False) is not False:
        raise BadRequest("stream: det-suite serve does not stream")
    prompts = _prompts(body, tokenizer)
    params = _as_list(body.get("sampling_params", {}), len(prompts), "sampling_params")
    starts = _as_list(body.get("logprob_start_len", 0), len(prompts), "logprob_start_len")
    logprobs = body.get("return_logprob", False)
    if not isinstance(logprobs, bool):
        raise BadRequest("return_logprob: expected true or false")
    asks = []
    for prompt, p, start in zip(prompts, params, starts):
        if not isinstance(p, dict):
            raise BadRequest("sampling_params: expected an object per prompt")
        unknown = set(p) - SAMPLING_KEYS
        if unknown:
            raise BadRequest(f"unknown field `{sorted(unknown)[0]}` in sampling_params")
        if p.get("temperature", 1.0) != 0.0 or p.get("frequency_penalty", 0.0) != 0.0 \
                or p.get("presence_penalty", 0.0) != 0.0:
            raise BadRequest("sampling_params: only greedy requests (temperature 0, no "
                             "penalties) are served")
        new = p.get("max_new_tokens")
        if isinstance(new, bool) or not isinstance(new, int) or new < 1:
            raise BadRequest("sampling_params.max_new_tokens: expected an int >= 1")
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < len(prompt):
            raise BadRequest(f"logprob_start_len: expected an int in [0, {len(prompt)})")
        asks.append(Ask(Request(tuple(prompt), new, logprobs_from=start + 1),
                        stop_at_eos=p.get("ignore_eos", False) is not True, logprobs=logprobs))
    return asks


def generate(backend, vocab: int, body, *, tokenizer=None, stops=()) -> list[dict]:
    """One `/generate` answer in SGLang's shape. The engine always decodes max_new_tokens;
    without ignore_eos the answer ends before the first stop id, which is what stopping
    there gives (greedy: the tokens before it do not depend on what follows)."""
    asks = parse_body(body, tokenizer)

    def echo(t: int) -> int:
        return t if t < vocab - 1 else 0

    items = []
    for ask, done in zip(asks, _in_waves(backend, [a.request for a in asks])):
        request = ask.request
        prompt, start = request.prompt_ids, request.logprobs_from - 1
        scored = len(prompt) - start - 1
        output, stopped = list(done.output_ids), False
        if ask.stop_at_eos:
            from det_suite.gsm8k.prompts import cut_at_stop
            kept, stopped = cut_at_stop(output, stops)
            output = list(kept) + ([done.output_ids[len(kept)]] if stopped else [])
        meta = {"prompt_tokens": len(prompt), "completion_tokens": len(output),
                "cached_tokens": done.cached_tokens,
                "finish_reason": ({"type": "stop", "matched": output[-1]} if stopped else
                                  {"type": "length", "length": len(output)})}
        if ask.logprobs:
            meta["input_token_logprobs"] = [[None, echo(prompt[start]), None]] + [
                [lp, echo(t), None] for lp, t in zip(done.logprobs[:scored], prompt[start + 1:])]
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in
                                             zip(done.logprobs[scored:], output)]
        text = tokenizer.decode(output, skip_special_tokens=True) if tokenizer else ""
        items.append({"text": text, "output_ids": output, "meta_info": meta})
    return items


def _in_waves(backend, requests: list[Request]) -> list:
    """The engine's completions, in waves its KV cache holds: SGLang queues what does not
    fit rather than failing the batch (det mode's rows do not depend on the wave; a prompt
    no wave can hold is a BadRequest naming the cache)."""
    from det_suite.engine.prefix_cache import CacheFullError

    try:
        return backend.generate(requests)
    except CacheFullError as exc:
        if len(requests) == 1:
            raise BadRequest(f"this prompt does not fit the KV cache ({exc}); start "
                             "`det-suite serve` with a larger --num-pages") from None
        half = len(requests) // 2
        return _in_waves(backend, requests[:half]) + _in_waves(backend, requests[half:])
    except ValueError as exc:  # the engine's own input checks (length, vocabulary)
        raise BadRequest(str(exc)) from None


class EngineServer:
    """`backend` (an embedded Backend) on host:port; one request at a time (the engine is
    not thread-safe). A context manager; `url` once started."""

    def __init__(self, backend, *, vocab: int, model: str, host: str = "127.0.0.1",
                 port: int = 0, tokenizer=None, stops=()) -> None:
        self.backend, self.vocab, self.model = backend, vocab, model
        self.tokenizer, self.stops = tokenizer, tuple(stops)
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status: int, payload) -> None:
                data = payload.encode() if isinstance(payload, str) else \
                    json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path = urlsplit(self.path).path
                if path in ("/health", "/health_generate"):
                    return self._answer(200, "")
                if path in ("/model_info", "/get_model_info"):
                    return self._answer(200, {"model_path": owner.model, "is_generation": True,
                                              "served_by": "det-suite serve"})
                if path in ("/server_info", "/get_server_info"):  # one engine, one device
                    return self._answer(200, {"model_path": owner.model, "tp_size": 1,
                                              "dp_size": 1, "served_by": "det-suite serve"})
                self._answer(404, {"error": f"det-suite serve has no GET {path}"})

            def do_POST(self):
                path = urlsplit(self.path).path
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    return self._answer(400, {"error": "body is not JSON"})
                with owner._lock:
                    if path == "/flush_cache":
                        owner.backend.flush_cache()
                        return self._answer(200, "Cache flushed.\n")
                    if path == "/generate":
                        try:
                            return self._answer(200, generate(
                                owner.backend, owner.vocab, body, tokenizer=owner.tokenizer,
                                stops=owner.stops))
                        except BadRequest as exc:
                            return self._answer(400, {"error": str(exc)})
                self._answer(404, {"error": f"det-suite serve has no POST {path}"})

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> "EngineServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "EngineServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def open_engine_server(model: str, *, mode: str = "det", device: str = "cpu",
                       cuda_graph: bool = False, page_size: int = 16,
                       num_pages: int | None = None, host: str = "127.0.0.1",
                       port: int = 0) -> EngineServer:
    """An EngineServer (not started) over a fresh embedded engine of `model`, with the
    model's tokenizer and stop ids when it has them; the caller closes `server.backend`."""
    from det_suite.backends.open import open_backend
    from det_suite.gsm8k.prompts import load_tokenizer, stop_ids
    from det_suite.models.spec import load_model

    checkpoint = load_model(model, device=device)
    backend = open_backend("embedded", model, mode=mode, cuda_graph=cuda_graph, device=device,
                           checkpoint=checkpoint, page_size=page_size,
                           num_pages=num_pages if num_pages is not None else
                           (None if device != "cpu" else 512))
    try:
        tokenizer = load_tokenizer(checkpoint)
    except ValueError:
        tokenizer = None  # input_ids only
    stops = stop_ids(tokenizer, checkpoint) if tokenizer is not None else ()
    try:
        return EngineServer(backend, vocab=int(checkpoint.config.vocab_size), model=model,
                            host=host, port=port, tokenizer=tokenizer, stops=stops)
    except OSError as exc:
        backend.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc}") from None

