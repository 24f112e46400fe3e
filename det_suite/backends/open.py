"""One door to every backend: a check names a backend and a model, and gets a `Backend`.

Checks (cache-hit, GSM8K, e2e timing) call `open_backend` so that a new backend is added
here once, not in each check."""

from __future__ import annotations

from det_suite.backends.interface import Backend

BACKENDS = ("embedded", "sglang")


def open_backend(backend: str, model: str, *, mode: str = "det", cuda_graph: bool = False,
                 device=None, checkpoint=None, **options) -> Backend:
    """`backend`: one of BACKENDS. `model`: a model spec (path, hub id or
    "synthetic:<preset>?seed=S"). `mode`: "det" (det-suite's kernels) or "stock" (the
    control). Other keyword arguments go to the backend (for the embedded engine:
    `engine.Engine`'s options such as page_size, chunk_size, max_seq_len, num_pages)."""
    if backend == "embedded":
        from det_suite.backends.embedded import EmbeddedBackend
        return EmbeddedBackend(model, mode=mode, cuda_graph=cuda_graph, device=device,
                               checkpoint=checkpoint, **options)
    if backend == "sglang":
        # mode "det": the det-suite plugin arm; "stock": the upstream arm. options: url (attach
        # to a running server) or launch options (chunk_size, page_size, work_dir,
        # attention_backend, extra_args, python, health_timeout, ...; backends.sglang.backend).
        if checkpoint is not None:
            raise ValueError("checkpoint: the sglang backend loads the model in its server; "
                             "pass a model spec, not a loaded checkpoint")
        if device is not None and str(device).split(":")[0] != "cuda":
            raise ValueError(f"device: an SGLang server runs on its CUDA GPU; got {device!r}")
        from det_suite.backends.sglang.backend import SGLangBackend
        return SGLangBackend(model, mode=mode, cuda_graph=cuda_graph, **options)
    raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}; got {backend!r}")
