"""Sequences and how their tokens are packed into forward calls.

Prefill: every request's uncached prompt tokens, packed request after request into calls of
at most `chunk_size` tokens (None: one call), with no padding: a request may be split over
calls (chunked prefill) and a call may hold several requests. Decode: one token per
unfinished request per call. Each call is one `PackedBatch` plus, for every logit row, what
the engine does with it (score a prompt token, or pick the next token greedily). A decode
step served by a CUDA Graph packs the same metadata in place instead (`graphs.DecodeInputs`),
from the O(1) per-sequence state here (`length`, `token_at`, `slot`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from det_suite.models.qwen3 import PackedBatch


@dataclass(eq=False)          # a sequence is an identity, not a value
class Sequence:
    prompt: tuple[int, ...]
    max_new_tokens: int
    first_logprob: int            # first prompt position whose logprob is returned (>= 1)
    pages: list[int]              # fixed at admission: covers every token it will write
    cached: int                   # prompt tokens served from the prefix cache
    computed: int = 0             # tokens whose K/V is in the cache
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.computed = self.cached

    @property
    def tokens(self) -> list[int]:
        """Prompt then output: a new list, O(length); per-step code uses `token_at`."""
        return list(self.prompt) + self.output

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.output)

    def token_at(self, pos: int) -> int:
        prompt = len(self.prompt)
        return self.prompt[pos] if pos < prompt else self.output[pos - prompt]

    def slot(self, pos: int, page_size: int) -> int:
        """Where position pos's K/V lives in the paged cache (page * page_size + offset)."""
        return self.pages[pos // page_size] * page_size + pos % page_size

    @property
    def finished(self) -> bool:
        return len(self.output) >= self.max_new_tokens

    @property
    def prefilled(self) -> bool:
        return self.computed >= len(self.prompt)


@dataclass(frozen=True)
class LogitRow:
    seq: Sequence
    target: int | None            # the prompt token scored, or None: choose greedily


@dataclass(frozen=True)
class Step:
    batch: PackedBatch
    rows: tuple[LogitRow, ...]
    chunks: tuple[tuple[Sequence, int, int], ...]   # (sequence, start, end) per request


def plan_prefill(seqs, chunk_size: int | None) -> list[list[tuple[Sequence, int, int]]]:
    """Calls of (sequence, start, end) token ranges, each call at most chunk_size tokens."""
    calls, current, budget = [], [], chunk_size
    for seq in seqs:
        start = seq.computed
        while start < len(seq.prompt):
            take = len(seq.prompt) - start if budget is None else min(budget,
                                                                      len(seq.prompt) - start)
            current.append((seq, start, start + take))
            start += take
            if budget is not None:
                budget -= take
                if budget == 0:
                    calls.append(current)
                    current, budget = [], chunk_size
    if current:
        calls.append(current)
    return calls


def build_step(chunks, page_size: int, device, *, width: int | None = None) -> Step:
    """The packed batch for one call over (sequence, start, end) ranges of each sequence's
    tokens; `width` pads block tables to a fixed number of pages (CUDA Graph buffers)."""
    tokens, positions, slots, starts, contexts, logit_rows, rows = [], [], [], [0], [], [], []
    tables = []
    for seq, start, end in chunks:
        for pos in range(start, end):
            row = len(tokens)
            tokens.append(seq.token_at(pos))
            positions.append(pos)
            if pos + 1 < len(seq.prompt):
                if pos + 1 >= seq.first_logprob:
                    logit_rows.append(row)
                    rows.append(LogitRow(seq, seq.prompt[pos + 1]))
            else:
                logit_rows.append(row)
                rows.append(LogitRow(seq, None))
        slots += [seq.slot(pos, page_size) for pos in range(start, end)]
        starts.append(len(tokens))
        contexts.append(start)
        tables.append(seq.pages)
    cols = width if width is not None else max(len(t) for t in tables)
    table = torch.zeros((len(tables), cols), dtype=torch.int32)
    for r, pages in enumerate(tables):
        table[r, :len(pages)] = torch.tensor(pages, dtype=torch.int32)
    batch = PackedBatch(
        token_ids=torch.tensor(tokens, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        block_tables=table.to(device),
        context_lens=torch.tensor(contexts, dtype=torch.int32, device=device),
        query_starts=torch.tensor(starts, dtype=torch.int32, device=device),
        logit_rows=torch.tensor(logit_rows, dtype=torch.int64, device=device))
    return Step(batch=batch, rows=tuple(rows), chunks=tuple(chunks))


def decode_chunks(seqs) -> list[tuple[Sequence, int, int]]:
    """One range per unfinished sequence: its last token, whose K/V is not yet written."""
    return [(seq, seq.length - 1, seq.length) for seq in seqs if not seq.finished]
