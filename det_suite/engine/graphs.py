"""CUDA Graph decode: one graph per captured batch size, replayed for padded batches.

A decode call of r requests is served by the graph of the smallest captured size b >= r:
the r real rows are written into the graph's static inputs, the b - r padding rows point at
the scratch page (position 0, no context) and are never read back. Batch invariance of the
op set is what makes the real rows' bits equal to an eager call on those r rows alone.
Larger batches than any captured size run eagerly.

A step costs the host one copy each way. All of a step's metadata lives in one byte buffer
whose typed views are the graph's static inputs (`DecodeInputs`); Python fills a host copy
of it (pinned on CUDA) in place and uploads it with one non-blocking copy. The graph ends
with the greedy pick (argmax, and the logprob of the chosen token), so the only thing read
back is (token, logprob) per row, in one copy. A sequence's block-table row is rewritten
only when a different sequence takes that row (its pages are fixed at admission), so the
per-step host work does not grow with the prompt.
"""

from __future__ import annotations

import math

import torch

from det_suite.engine.kv_cache import SCRATCH_PAGE
from det_suite.models.qwen3 import PackedBatch

WARMUP_CALLS = 2   # Triton compiles on first call; capture must not compile
_ALIGN = 8         # bytes: every field starts where an int64 view of it may start


def _layout(size: int, width: int) -> tuple[tuple[str, torch.dtype, tuple[int, ...]], ...]:
    # token_ids, positions, slot_mapping first and adjacent: one (3, size) int64 write.
    return (("token_ids", torch.int64, (size,)),
            ("positions", torch.int64, (size,)),
            ("slot_mapping", torch.int64, (size,)),
            ("logit_rows", torch.int64, (size,)),
            ("context_lens", torch.int32, (size,)),
            ("query_starts", torch.int32, (size + 1,)),
            ("block_tables", torch.int32, (size, width)))


def _field_bytes(dtype: torch.dtype, shape) -> int:
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return -(-nbytes // _ALIGN) * _ALIGN


def _views(buffer: torch.Tensor, layout) -> PackedBatch:
    """The PackedBatch whose fields are typed views into the byte buffer `buffer`."""
    fields, offset = {}, 0
    for name, dtype, shape in layout:
        count = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        fields[name] = buffer[offset:offset + count].view(dtype).view(shape)
        offset += _field_bytes(dtype, shape)
    return PackedBatch(**fields)


class DecodeInputs:
    """One captured size's decode inputs and picks: `staged` (host) and `batch` (device)
    are the same byte layout; `batch`'s fields are what the graph reads. `picked` is the
    graph's output: row 0 the chosen token, row 1 the bits of its fp32 logprob."""

    def __init__(self, size: int, width: int, page_size: int, device) -> None:
        self.size, self.width, self.page_size = size, width, page_size
        self.device = torch.device(device)
        pin = self.device.type == "cuda"
        layout = _layout(size, width)
        nbytes = sum(_field_bytes(dtype, shape) for _, dtype, shape in layout)
        self.host = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=pin)
        self.buffer = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)
        self.staged = _views(self.host, layout)
        self.batch = _views(self.buffer, layout)
        self._rows = self.host[:3 * size * 8].view(torch.int64).view(3, size)
        self.staged.slot_mapping.fill_(SCRATCH_PAGE)
        self.staged.block_tables.fill_(SCRATCH_PAGE)
        self.staged.query_starts.copy_(torch.arange(size + 1, dtype=torch.int32))
        self.staged.logit_rows.copy_(torch.arange(size, dtype=torch.int64))
        self.buffer.copy_(self.host)
        self.picked = torch.zeros((2, size), dtype=torch.int32, device=self.device)
        self.picked_host = torch.zeros((2, size), dtype=torch.int32, pin_memory=pin)
        self._owners: list = [None] * size      # the sequence whose pages each table row holds

    def pack(self, seqs) -> None:
        """Stage one decode step: each sequence's last token, whose K/V is not yet written,
        at its position, attending to every earlier token. Padding rows: scratch, no context."""
        rows = len(seqs)
        if not 1 <= rows <= self.size:
            raise ValueError(f"seqs: expected 1 to {self.size} sequences, got {rows}")
        tokens, positions, slots = [], [], []
        for r, seq in enumerate(seqs):
            pos = seq.length - 1
            if seq.computed != pos:
                # Not a decode row (a prompt token still unwritten would need a target).
                raise RuntimeError(f"decode: a sequence has {seq.computed} tokens in the cache, "
                                   f"expected all but its last ({pos})")
            tokens.append(seq.token_at(pos))
            positions.append(pos)
            slots.append(seq.slot(pos, self.page_size))
            if self._owners[r] is not seq:
                self._write_table(r, seq.pages)
                self._owners[r] = seq
        for r in range(rows, self.size):
            if self._owners[r] is not None:
                self._write_table(r, ())
                self._owners[r] = None
        pad = [0] * (self.size - rows)
        self._rows.copy_(torch.tensor([tokens + pad, positions + pad,
                                       slots + [SCRATCH_PAGE] * len(pad)], dtype=torch.int64))
        self.staged.context_lens.copy_(torch.tensor(positions + pad, dtype=torch.int32))

    def _write_table(self, row: int, pages) -> None:
        count = len(pages)
        if count > self.width:
            raise ValueError(f"pages: a sequence holds {count} pages, more than the block "
                             f"table's width {self.width}")
        table = self.staged.block_tables[row]
        if count:
            table[:count].copy_(torch.tensor(pages, dtype=torch.int32))
        table[count:].fill_(SCRATCH_PAGE)

    def upload(self) -> None:
        """The one host-to-device copy of a step (pinned -> device, stream-ordered)."""
        self.buffer.copy_(self.host, non_blocking=True)

    def download(self, rows: int) -> tuple[list[int], list[float]]:
        """The one device-to-host copy of a step: (tokens, logprobs) of the first `rows`.
        Waiting for it also frees `host` for the next step's writes (the upload precedes it
        on the stream)."""
        self.picked_host.copy_(self.picked, non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return (self.picked_host[0, :rows].tolist(),
                self.picked_host[1, :rows].view(torch.float32).tolist())


def forward_and_pick(forward, kv_caches, inputs: DecodeInputs) -> torch.Tensor:
    """The decode forward then the greedy pick, as the engine's eager path makes it:
    torch.argmax of each logprobs row, and that row's logprob of the chosen token."""
    logprobs = forward(inputs.batch, kv_caches)
    token = torch.argmax(logprobs, dim=-1)
    inputs.picked[0].copy_(token)
    inputs.picked[1].view(torch.float32).copy_(logprobs.gather(1, token[:, None])[:, 0])
    return logprobs


class DecodeGraphs:
    def __init__(self, forward, kv_caches, batch_sizes, width: int, device, *,
                 capture: bool = True) -> None:
        sizes = sorted(set(batch_sizes))
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1
                            for s in sizes):
            raise ValueError(f"graph_batch_sizes: expected positive ints, got {batch_sizes!r}")
        if capture and torch.device(device).type != "cuda":
            raise ValueError("cuda_graph=True needs a CUDA device")
        self.width, self.sizes = width, sizes
        page_size = kv_caches[0][0].shape[1]
        self._staging = {size: DecodeInputs(size, width, page_size, device) for size in sizes}
        self._inputs: dict[int, PackedBatch] = {s: i.batch for s, i in self._staging.items()}
        self._outputs: dict[int, torch.Tensor] = {}
        self._replays: dict = {}
        if not capture:
            # The same static buffers, padding and pick, run eagerly: lets the CPU tests check
            # everything about graph decode except the capture itself.
            for size, inputs in self._staging.items():
                self._replays[size] = (lambda i=inputs, n=size: self._outputs.__setitem__(
                    n, forward_and_pick(forward, kv_caches, i)))
            return
        pool = None
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))   # the inputs' initial upload
        for size in reversed(sizes):          # largest first: the pool is sized once
            inputs = self._staging[size]
            with torch.cuda.stream(stream):
                for _ in range(WARMUP_CALLS):
                    forward_and_pick(forward, kv_caches, inputs)
            torch.cuda.current_stream(device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                out = forward_and_pick(forward, kv_caches, inputs)
            pool = graph.pool()
            self._outputs[size] = out
            self._replays[size] = graph.replay
        torch.cuda.synchronize(device)

    def size_for(self, rows: int) -> int | None:
        return next((size for size in self.sizes if size >= rows), None)

    def decode(self, seqs) -> tuple[list[int], list[float]]:
        """One greedy decode step of `seqs` (at most the largest captured size): the chosen
        token and its logprob per sequence, in order. One upload, one replay, one download."""
        size = self.size_for(len(seqs))
        if size is None:
            raise ValueError(f"seqs: {len(seqs)} sequences exceed the largest captured batch "
                             f"size {self.sizes[-1]}; run them eagerly")
        inputs = self._staging[size]
        inputs.pack(seqs)
        inputs.upload()
        self._replays[size]()
        return inputs.download(len(seqs))
