"""CUDA Graph decode: one graph per captured batch size, replayed for padded batches.

A decode call of r requests is served by the graph of the smallest captured size b >= r:
the r real rows are written into the graph's static inputs, the b - r padding rows point at
the scratch page (position 0, no context) and are never read back. Batch invariance of the
op set is what makes the real rows' bits equal to an eager call on those r rows alone.
Larger batches than any captured size run eagerly.
"""

from __future__ import annotations

import torch

from det_suite.engine.kv_cache import SCRATCH_PAGE
from det_suite.models.qwen3 import PackedBatch

WARMUP_CALLS = 2   # Triton compiles on first call; capture must not compile


def _static_batch(size: int, width: int, device) -> PackedBatch:
    return PackedBatch(
        token_ids=torch.zeros(size, dtype=torch.int64, device=device),
        positions=torch.zeros(size, dtype=torch.int64, device=device),
        slot_mapping=torch.full((size,), SCRATCH_PAGE, dtype=torch.int64, device=device),
        block_tables=torch.full((size, width), SCRATCH_PAGE, dtype=torch.int32, device=device),
        context_lens=torch.zeros(size, dtype=torch.int32, device=device),
        query_starts=torch.arange(size + 1, dtype=torch.int32, device=device),
        logit_rows=torch.arange(size, dtype=torch.int64, device=device))


class DecodeGraphs:
    def __init__(self, forward, kv_caches, batch_sizes, width: int, device, *,
                 capture: bool = True) -> None:
        sizes = sorted(set(batch_sizes))
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1
                            for s in sizes):
            raise ValueError(f"graph_batch_sizes: expected positive ints, got {batch_sizes!r}")
        self.width, self.sizes = width, sizes
        self._inputs: dict[int, PackedBatch] = {}
        self._outputs: dict[int, torch.Tensor] = {}
        self._replays: dict = {}
        if not capture:
            # The same static buffers and padding, run eagerly: lets the CPU tests check
            # everything about graph decode except the capture itself.
            for size in sizes:
                batch = _static_batch(size, width, device)
                self._inputs[size] = batch
                self._replays[size] = (lambda b=batch, n=size:
                                       self._outputs.__setitem__(n, forward(b, kv_caches)))
            return
        if torch.device(device).type != "cuda":
            raise ValueError("cuda_graph=True needs a CUDA device")
        pool = None
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        for size in reversed(sizes):          # largest first: the pool is sized once
            batch = _static_batch(size, width, device)
            with torch.cuda.stream(stream):
                for _ in range(WARMUP_CALLS):
                    forward(batch, kv_caches)
            torch.cuda.current_stream(device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                out = forward(batch, kv_caches)
            pool = graph.pool()
            self._inputs[size], self._outputs[size] = batch, out
            self._replays[size] = graph.replay
        torch.cuda.synchronize(device)

    def size_for(self, rows: int) -> int | None:
        return next((size for size in self.sizes if size >= rows), None)

    def run(self, batch: PackedBatch) -> torch.Tensor:
        """Replay for an eager-built decode batch (one query per request); (r, V) logprobs."""
        rows = batch.token_ids.shape[0]
        size = self.size_for(rows)
        static = self._inputs[size]
        static.token_ids[:rows] = batch.token_ids
        static.token_ids[rows:] = 0
        static.positions[:rows] = batch.positions
        static.positions[rows:] = 0
        static.slot_mapping[:rows] = batch.slot_mapping
        static.slot_mapping[rows:] = SCRATCH_PAGE
        static.block_tables.fill_(SCRATCH_PAGE)
        static.block_tables[:rows, :batch.block_tables.shape[1]] = batch.block_tables
        static.context_lens[:rows] = batch.context_lens
        static.context_lens[rows:] = 0
        self._replays[size]()
        return self._outputs[size][:rows]
