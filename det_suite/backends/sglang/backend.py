"""`SGLangBackend`: the `Backend` a check talks to, over a server det-suite boots or one
already running at a URL.

Modes map to the A/B arms: "det" is SGLang with det-suite's plugin (its kernel serves the
ModelOpt FP8 linears), "stock" the upstream arm (SGLANG_PLUGINS excludes the plugin). Both
run SGLang's deterministic inference. A server reached by URL is whatever it was started
as: the caller names its mode, and the report carries that claim with the URL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from det_suite.backends.interface import Completion, Request, engine_label
from det_suite.backends.sglang.client import SGLangClient, SGLangConnectionError, SGLangError

MODES = ("det", "stock")


def _hub_config(repo_id: str) -> dict:
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - offline or refused: a warm cache may still hold it
        path = hf_hub_download(repo_id, "config.json", local_files_only=True)
    return json.loads(Path(path).read_text())


def model_vocab(model: str) -> int:
    """The vocabulary size SGLang checks input ids against (config.json's vocab_size), for
    a folder, a hub id or a synthetic spec."""
    from det_suite.models.spec import ModelSpec

    spec = ModelSpec.parse(model)
    if spec.synthetic:
        from det_suite.models.synthetic import preset
        return int(preset(spec.preset).config().vocab_size)
    if spec.kind == "path":
        config = json.loads((spec.path / "config.json").read_text())
    else:
        config = _hub_config(spec.hub_id)
    vocab = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    if not isinstance(vocab, int) or vocab < 1:
        raise ValueError(f"model {model!r}: config.json has no vocab_size")
    return vocab


def served_model_path(model: str, work_dir: Path, *, progress=print) -> str:
    """What --model-path gets: a folder or hub id as is; a synthetic spec written once into
    work_dir (same seed, same bytes, so an existing copy is reused)."""
    from det_suite.models.spec import ModelSpec

    spec = ModelSpec.parse(model)
    if not spec.synthetic:
        return str(spec.path.resolve()) if spec.kind == "path" else spec.hub_id
    import torch

    from det_suite.models.synthetic import write_synthetic

    name, seed = spec.preset, spec.seed
    out = Path(work_dir) / f"synthetic-{name}-seed{seed}"
    if not (out / "config.json").exists():
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if progress:
            progress(f"sglang: writing {model} to {out} for the server")
        write_synthetic(name, seed, out, device=device)
    return str(out)


def _served_parallel(client) -> dict:
    """A running server's tensor / data parallel sizes, from GET /server_info (its resolved
    arguments); None for a size it does not report."""
    try:
        info = client.server_info()
    except SGLangError:
        info = {}
    return {name: info.get(name) if isinstance(info, dict) else None
            for name in ("tp_size", "dp_size")}


class SGLangBackend:
    """`url`: attach to a running server (nothing is started or stopped). Otherwise a
    server is booted for `model` with the seed's settings; `server_options` go to
    `server.ServerSettings` (attention_backend, extra_args, python, health_timeout, ...),
    its log and any synthetic checkpoint land in `work_dir`."""

    def __init__(self, model: str, *, mode: str = "det", cuda_graph: bool = True,
                 url: str | None = None, chunk_size: int | None = None,
                 page_size: int | None = None, work_dir: str | Path = "sglang-work",
                 request_timeout: float = 600.0, progress=print, **server_options) -> None:
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        self.mode, self.model, self.server = mode, model, None
        # The det arm's routing counts for a server det-suite booted (None: not booted here,
        # or the stock arm, whose plugin is not loaded).
        self.routing: dict | None = None
        # Tensor / data parallel sizes the server runs with (None where it does not say).
        self.parallel: dict | None = None
        progress = progress or (lambda _line: None)
        if url is not None:
            if server_options or chunk_size is not None or page_size is not None:
                raise ValueError("url: a running server's settings are its own; got launch "
                                 f"options {sorted(server_options) or ['chunk_size/page_size']}")
            self.client = SGLangClient(url, timeout=request_timeout,
                                       vocab_size=model_vocab(model))
            if not self.client.healthy():
                raise SGLangConnectionError(f"url: no healthy SGLang server at {url} "
                                            "(GET /health failed)")
            self.name = f"sglang:{mode}@{self.client.url}"
            self.parallel = _served_parallel(self.client)
            return
        from det_suite.backends.sglang.server import ServerSettings, SGLangServer

        work = Path(work_dir)
        label = engine_label(cuda_graph, chunk_size)
        settings = ServerSettings(
            model_path=served_model_path(model, work, progress=progress), plugin=mode == "det",
            cuda_graph=cuda_graph, chunked_prefill_size=chunk_size, page_size=page_size,
            log_path=str(work / f"sglang-{mode}-{label}.log"), **server_options)
        self.server = SGLangServer(settings, progress=progress).start()
        self.routing = self.server.routing
        self.parallel = settings.parallel
        self.client = SGLangClient(self.server.url, timeout=request_timeout,
                                   vocab_size=model_vocab(model))
        self.name = f"sglang:{mode}:{label}"

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return self.client.generate(requests)

    def flush_cache(self) -> None:
        self.client.flush_cache()

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
