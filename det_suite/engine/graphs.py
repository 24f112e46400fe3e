"""CUDA Graph decode: one graph per captured batch size, replayed for padded batches.

A decode call of r requests is served by the graph of the smallest captured size b >= r:
the r real rows are written into the graph's static inputs, the b - r padding rows point at
the scratch page (position 0, no context) and are never read back. Batch invariance of the
op set is what makes the real rows' bits equal to an eager call on those r rows alone.
Larger batches than any captured size run eagerly.

A run of decode steps costs the host one copy each way, however many steps it holds. All
of a step's metadata lives in one byte buffer whose typed views are the graph's static
inputs (`DecodeInputs`). Everything but the tokens is known before the run starts (each
step is one position further; a sequence's pages are fixed at admission), so Python stages
every step's metadata at once in a host copy (pinned on CUDA), uploads it with one
non-blocking copy, and before each replay one device-to-device copy loads that step's
metadata into the static buffer. The graph ends with the greedy pick (argmax, and the
logprob of the chosen token) and writes the chosen token into its own token input, so the
next step reads it on the device: the host never waits between steps, and the GPU runs the
steps back to back. Each step's pick is kept on the device; one copy brings the run's
picks back. A sequence's block-table row is rewritten only when a different sequence takes
that row, so the per-run host work does not grow with the prompt.
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


def _field_views(buffer: torch.Tensor, layout) -> dict[str, torch.Tensor]:
    """Typed views of `layout`'s fields into the byte buffer `buffer`; with a (steps, bytes)
    buffer, each field gains a leading steps dimension."""
    fields, offset = {}, 0
    lead = tuple(buffer.shape[:-1])
    for name, dtype, shape in layout:
        count = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        fields[name] = buffer[..., offset:offset + count].view(dtype).view(*lead, *shape)
        offset += _field_bytes(dtype, shape)
    return fields


def _views(buffer: torch.Tensor, layout) -> PackedBatch:
    """The PackedBatch whose fields are typed views into the byte buffer `buffer`."""
    return PackedBatch(**_field_views(buffer, layout))


class DecodeInputs:
    """One captured size's decode inputs and picks: `staged` (host) and `batch` (device)
    are the same byte layout; `batch`'s fields are what the graph reads. `picked` is the
    graph's output: row 0 the chosen token, row 1 the bits of its fp32 logprob.

    A run of `steps` decode steps: `pack` stages step 0 in `staged` and has `stage_steps` derive
    every step from it into the run buffer (`run_host`: the block tables once, which a run
    never changes, then each step's other fields), `upload` copies the run to the device,
    `load_step(j)` puts step j into the static inputs (from step 1 on, all but the tokens,
    which the previous replay wrote, and the tables), `keep_picks(j)` saves the replay's
    picks, `download` returns all of them."""

    def __init__(self, size: int, width: int, page_size: int, device) -> None:
        self.size, self.width, self.page_size = size, width, page_size
        self.device = torch.device(device)
        self._pin = self.device.type == "cuda"
        self._layout = _layout(size, width)
        self.nbytes = sum(_field_bytes(dtype, shape) for _, dtype, shape in self._layout)
        # token_ids are the first field (a step after the first loads the bytes past them),
        # block_tables the last (the run buffer keeps one copy of them, not one per step).
        self._token_bytes = _field_bytes(torch.int64, (size,))
        self._step_layout = self._layout[:-1]
        self._step_bytes = self.nbytes - _field_bytes(torch.int32, (size, width))
        self.host = torch.zeros(self.nbytes, dtype=torch.uint8, pin_memory=self._pin)
        self.buffer = torch.zeros(self.nbytes, dtype=torch.uint8, device=self.device)
        self.staged = _views(self.host, self._layout)
        self.batch = _views(self.buffer, self._layout)
        self._rows = self.host[:3 * size * 8].view(torch.int64).view(3, size)
        self.staged.slot_mapping.fill_(SCRATCH_PAGE)
        self.staged.block_tables.fill_(SCRATCH_PAGE)
        self.staged.query_starts.copy_(torch.arange(size + 1, dtype=torch.int32))
        self.staged.logit_rows.copy_(torch.arange(size, dtype=torch.int64))
        self.buffer.copy_(self.host)
        self.picked = torch.zeros((2, size), dtype=torch.int32, device=self.device)
        self._owners: list = [None] * size      # the sequence whose pages each table row holds
        self._rows_in_run = 0
        self._steps = 0
        self._reserve(1)

    def _reserve(self, steps: int) -> None:
        """Run buffers for at least `steps` steps (grown by doubling, kept across runs)."""
        have = getattr(self, "picks", None)
        if have is not None and have.shape[0] >= steps:
            return
        count = max(steps, 2 * have.shape[0] if have is not None else 1)
        nbytes = self.nbytes - self._step_bytes + count * self._step_bytes
        self.run_host = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=self._pin)
        self.run_device = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)
        self.picks = torch.zeros((count, 2, self.size), dtype=torch.int32, device=self.device)
        self.picks_host = torch.zeros((count, 2, self.size), dtype=torch.int32,
                                      pin_memory=self._pin)

    def pack(self, seqs, steps: int = 1) -> None:
        """Stage a run's first decode step: each sequence's last token, whose K/V is not yet
        written, at its position, attending to every earlier token. Padding rows: scratch, no
        context. The run is `steps` steps (`stage_steps`) until it is staged again."""
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
        self._rows_in_run = rows
        self.stage_steps(steps)

    def stage_steps(self, steps: int) -> None:
        """Stage a run of `steps` steps from the packed step 0: step j is every real row one
        position further (its slot from its block-table row; the token the device's), the
        padding rows unchanged. The caller guarantees every sequence owns pages for them."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps: expected an int >= 1, got {steps!r}")
        self._reserve(steps)
        tables, run = self._run_parts(self.run_host, steps)
        tables.copy_(self.host[self._step_bytes:])
        run.copy_(self.host[:self._step_bytes].expand(steps, -1))
        rows = self._rows_in_run
        if steps > 1 and rows:
            fields = _field_views(run, self._step_layout)
            ahead = torch.arange(1, steps, dtype=torch.int64)[:, None]
            positions = self.staged.positions[:rows][None, :] + ahead          # (steps-1, rows)
            tables = self.staged.block_tables[:rows].to(torch.int64)            # (rows, width)
            pages = torch.gather(tables.t(), 0, positions // self.page_size)   # (steps-1, rows)
            fields["positions"][1:, :rows] = positions
            fields["context_lens"][1:, :rows] = positions.to(torch.int32)
            fields["slot_mapping"][1:, :rows] = (pages * self.page_size
                                                 + positions % self.page_size)
        self._steps = steps

    def _write_table(self, row: int, pages) -> None:
        count = len(pages)
        if count > self.width:
            raise ValueError(f"pages: a sequence holds {count} pages, more than the block "
                             f"table's width {self.width}")
        table = self.staged.block_tables[row]
        if count:
            table[:count].copy_(torch.tensor(pages, dtype=torch.int32))
        table[count:].fill_(SCRATCH_PAGE)

    def _run_parts(self, buffer: torch.Tensor, steps: int):
        """(block tables, (steps, step bytes) rows) of a run buffer."""
        tables = self.nbytes - self._step_bytes
        rows = buffer[tables:tables + steps * self._step_bytes].view(steps, self._step_bytes)
        return buffer[:tables], rows

    def upload(self) -> None:
        """The one host-to-device copy of a run (pinned -> device, stream-ordered)."""
        used = self.nbytes - self._step_bytes + self._steps * self._step_bytes
        self.run_device[:used].copy_(self.run_host[:used], non_blocking=True)

    def load_step(self, step: int) -> None:
        """Step `step`'s metadata into the static inputs (device to device): at step 0 also
        the block tables; from step 1 on the tokens are left alone, as the previous replay
        wrote its picks there."""
        tables, run = self._run_parts(self.run_device, self._steps)
        if step == 0:
            self.buffer[self._step_bytes:].copy_(tables, non_blocking=True)
        skip = 0 if step == 0 else self._token_bytes
        self.buffer[skip:self._step_bytes].copy_(run[step, skip:], non_blocking=True)

    def keep_picks(self, step: int) -> None:
        self.picks[step].copy_(self.picked, non_blocking=True)

    def download(self, rows: int) -> list[tuple[list[int], list[float]]]:
        """The one device-to-host copy of a run: per step, (tokens, logprobs) of the first
        `rows`. Waiting for it also frees the run's host buffer for the next run's writes
        (the upload precedes it on the stream)."""
        steps = self._steps
        self.picks_host[:steps].copy_(self.picks[:steps], non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        picks = self.picks_host[:steps, :, :rows]
        return [(tokens.tolist(), values.view(torch.float32).tolist())
                for tokens, values in zip(picks[:, 0], picks[:, 1])]


def steps_left(seqs) -> int:
    """The longest decode run `seqs` can take together: the fewest tokens any of them may
    still add (each owns pages for that many)."""
    return min(seq.max_new_tokens - len(seq.output) for seq in seqs)


def forward_and_pick(forward, kv_caches, inputs: DecodeInputs) -> torch.Tensor:
    """The decode forward then the greedy pick, as the engine's eager path makes it:
    torch.argmax of each logprobs row, and that row's logprob of the chosen token. The
    chosen tokens become the token inputs of the next step (after the forward read them)."""
    logprobs = forward(inputs.batch, kv_caches)
    token = torch.argmax(logprobs, dim=-1)
    inputs.picked[0].copy_(token)
    inputs.picked[1].view(torch.float32).copy_(logprobs.gather(1, token[:, None])[:, 0])
    inputs.batch.token_ids.copy_(token)
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

    def decode(self, seqs, steps: int = 1) -> list[tuple[list[int], list[float]]]:
        """`steps` greedy decode steps of `seqs` (at most the largest captured size), each
        step's token the previous one's pick: per step, the chosen token and its logprob per
        sequence, in order. One upload, `steps` replays queued without a wait, one download.
        Every sequence must own pages for `steps` more tokens."""
        size = self.size_for(len(seqs))
        if size is None:
            raise ValueError(f"seqs: {len(seqs)} sequences exceed the largest captured batch "
                             f"size {self.sizes[-1]}; run them eagerly")
        room = steps_left(seqs)
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= room:
            raise ValueError(f"steps: expected an int in [1, {room}] (the fewest tokens a "
                             f"sequence still has pages for), got {steps!r}")
        inputs = self._staging[size]
        inputs.pack(seqs, steps)
        inputs.upload()
        for step in range(steps):
            inputs.load_step(step)
            self._replays[size]()
            inputs.keep_picks(step)
        return inputs.download(len(seqs))
