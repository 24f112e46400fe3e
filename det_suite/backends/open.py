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
        raise NotImplementedError("backend 'sglang': not built yet (issue 14)")
    raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}; got {backend!r}")
