"""The embedded engine as a backend: no serving framework, det-suite's own kernels (det
mode) or torch/vendor ops (stock mode, the control), offline on any CUDA GPU or on the CPU
under the Triton interpreter."""

from __future__ import annotations

from typing import Sequence

from det_suite.backends.interface import Completion, Request


class EmbeddedBackend:
    """`model_spec`: a local path, a hub id or "synthetic:<preset>?seed=S" (see
    `models.spec.load_model`); `checkpoint`: an already loaded one (then the spec only
    names it). Other keyword arguments go to `engine.Engine`."""

    def __init__(self, model_spec: str, *, mode: str = "det", cuda_graph: bool = False,
                 device=None, checkpoint=None, **engine_options) -> None:
        import torch

        from det_suite.engine import Engine

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if checkpoint is None:
            from det_suite.models.spec import load_model
            checkpoint = load_model(model_spec, device=device)
        self.model_spec = model_spec
        self.engine = Engine(checkpoint, mode=mode, cuda_graph=cuda_graph, device=device,
                             **engine_options)
        self.name = f"embedded:{mode}:{'graph' if cuda_graph else 'eager'}"

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        return self.engine.generate(requests)

    def flush_cache(self) -> None:
        self.engine.flush_cache()

    def close(self) -> None:
        self.engine.close()
