"""The embedded engine behind the part of SGLang's native HTTP API the checks use:
`/generate` (batched input_ids, greedy, forced length, logprobs from logprob_start_len),
`/flush_cache`, `/health`, `/health_generate`, `/model_info`.

SGLang's conventions are kept, so an SGLang client (det-suite's, or SGLang's own) cannot
tell the two apart on this subset: the input-logprob window starts at logprob_start_len
with a None first entry, prompt ids >= vocab_size - 1 are echoed as 0 (as SGLang 0.5.23's
logprob processor does), and a request outside the subset (sampling, unknown keys) is
refused with HTTP 400 naming the field, never served differently.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from det_suite.backends.interface import Request

SAMPLING_KEYS = {"max_new_tokens", "temperature", "ignore_eos"}
BODY_KEYS = {"input_ids", "sampling_params", "return_logprob", "logprob_start_len",
             "return_text_in_logprobs"}


class BadRequest(ValueError):
    pass


def _as_list(value, count: int, name: str) -> list:
    if isinstance(value, list):
        if len(value) != count:
            raise BadRequest(f"{name}: {len(value)} entries for {count} prompts")
        return value
    return [value] * count


def parse_body(body) -> list[Request]:
    """The det-suite Requests one `/generate` body asks for; BadRequest outside the subset."""
    if not isinstance(body, dict):
        raise BadRequest("expected a JSON object")
    unknown = set(body) - BODY_KEYS
    if unknown:
        raise BadRequest(f"unknown field `{sorted(unknown)[0]}` (det-suite serve answers the "
                         f"subset {sorted(BODY_KEYS)})")
    ids = body.get("input_ids")
    if isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids):
        ids = [ids]
    if not isinstance(ids, list) or not ids or not all(
            isinstance(p, list) and p and all(isinstance(t, int) and t >= 0 for t in p)
            for p in ids):
        raise BadRequest("input_ids: expected token ids (a list, or a list of lists)")
    if body.get("return_logprob") is not True:
        raise BadRequest("return_logprob: det-suite serve always returns logprobs; send true")
    params = _as_list(body.get("sampling_params", {}), len(ids), "sampling_params")
    starts = _as_list(body.get("logprob_start_len", 0), len(ids), "logprob_start_len")
    requests = []
    for prompt, p, start in zip(ids, params, starts):
        unknown = set(p) - SAMPLING_KEYS
        if unknown:
            raise BadRequest(f"unknown field `{sorted(unknown)[0]}` in sampling_params")
        if p.get("temperature") != 0.0 or p.get("ignore_eos") is not True:
            raise BadRequest("sampling_params: only greedy (temperature 0), forced-length "
                             "(ignore_eos true) requests are served")
        new = p.get("max_new_tokens")
        if not isinstance(new, int) or new < 1:
            raise BadRequest("sampling_params.max_new_tokens: expected an int >= 1")
        if not isinstance(start, int) or not 0 <= start < len(prompt):
            raise BadRequest(f"logprob_start_len: expected an int in [0, {len(prompt)})")
        requests.append(Request(tuple(prompt), new, logprobs_from=start + 1))
    return requests


def generate(backend, vocab: int, body) -> list[dict]:
    """One `/generate` answer in SGLang's shape."""
    requests = parse_body(body)

    def echo(t: int) -> int:
        return t if t < vocab - 1 else 0

    items = []
    for request, done in zip(requests, backend.generate(requests)):
        prompt, start = request.prompt_ids, request.logprobs_from - 1
        scored = len(prompt) - start - 1
        items.append({"text": "", "output_ids": list(done.output_ids), "meta_info": {
            "prompt_tokens": len(prompt), "completion_tokens": len(done.output_ids),
            "cached_tokens": done.cached_tokens,
            "finish_reason": {"type": "length", "length": len(done.output_ids)},
            "input_token_logprobs": [[None, echo(prompt[start]), None]] + [
                [lp, echo(t), None] for lp, t in zip(done.logprobs[:scored], prompt[start + 1:])],
            "output_token_logprobs": [[lp, t, None] for lp, t in
                                      zip(done.logprobs[scored:], done.output_ids)]}})
    return items


class EngineServer:
    """`backend` (an embedded Backend) on host:port; one request at a time (the engine is
    not thread-safe). A context manager; `url` once started."""

    def __init__(self, backend, *, vocab: int, model: str, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.backend, self.vocab, self.model = backend, vocab, model
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
                            return self._answer(200, generate(owner.backend, owner.vocab,
                                                              body))
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
