"""The embedded engine: a Qwen3 FP8 checkpoint, an op set (det or stock), a paged KV cache
with a prefix cache, chunked prefill, greedy decode, CUDA Graph decode.

On the CPU the kernels run on Triton's interpreter, made to compute what a GPU computes
(`platform.gpu_faithful_interpreter`) by the interpreter switch, for the whole process.

`generate` runs a list of requests as one batch: each request's prompt is matched against
the prefix cache (full pages only, and never past the first position whose logprob is
asked for, since a cached position has no logits), only the uncached suffix is prefilled,
then every request decodes greedily for exactly max_new_tokens tokens (EOS ignored). The
completion carries the selected-token logprob of every prompt position from
max(logprobs_from, 1) (position 0 has no context) and of every generated token, and how
many prompt tokens came from the cache. When a request finishes, the full pages of its
tokens enter the prefix cache.
"""

from __future__ import annotations

import math
from typing import Sequence as Seq

import torch

from det_suite.backends.interface import Completion, Request
from det_suite.engine.graphs import DecodeGraphs, steps_left
from det_suite.engine.kv_cache import allocate_kv
from det_suite.engine.opsets import MODES, OpSet, opset_for
from det_suite.engine.prefix_cache import PagePool
from det_suite.engine.scheduler import Sequence, Step, build_step, decode_chunks, plan_prefill
from det_suite.models.qwen3 import Qwen3Model

DEFAULT_MAX_SEQ_LEN = 8192
DEFAULT_CONCURRENT = 8     # default cache: this many max_seq_len sequences


def _positive_int(value, name: str, *, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1{' or None' if allow_none else ''}, "
                         f"got {value!r}")
    return value


class Engine:
    def __init__(self, checkpoint, *, mode: str = "det", page_size: int = 16,
                 num_pages: int | None = None, chunk_size: int | None = None,
                 cuda_graph: bool = False, graph_batch_sizes=(1, 2, 4, 8),
                 max_seq_len: int | None = None, device=None, ops: OpSet | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        config = checkpoint.config
        self.page_size = _positive_int(page_size, "page_size")
        self.chunk_size = _positive_int(chunk_size, "chunk_size", allow_none=True)
        limit = getattr(config, "max_position_embeddings", DEFAULT_MAX_SEQ_LEN)
        self.max_seq_len = _positive_int(max_seq_len or min(limit, DEFAULT_MAX_SEQ_LEN),
                                         "max_seq_len")
        if self.max_seq_len > limit:
            raise ValueError(f"max_seq_len: {self.max_seq_len} exceeds the model's "
                             f"max_position_embeddings {limit}")
        self.pages_per_seq = math.ceil(self.max_seq_len / self.page_size)
        if num_pages is None:
            num_pages = self.pages_per_seq * DEFAULT_CONCURRENT + 1
        self.device = torch.device(device) if device is not None else checkpoint.device
        if checkpoint.device != self.device:
            checkpoint = checkpoint.to(self.device)
        self.mode = mode
        self.ops = ops if ops is not None else opset_for(mode)
        self.model = Qwen3Model(checkpoint, self.ops, max_positions=self.max_seq_len)
        self.vocab = config.vocab_size
        self.pool = PagePool(_positive_int(num_pages, "num_pages"), self.page_size)
        self.kv = allocate_kv(config, num_pages, self.page_size, self.device,
                              checkpoint.embed_tokens.dtype)
        self.graphs = None
        if cuda_graph:
            self.graphs = DecodeGraphs(self.model.forward, self.kv, graph_batch_sizes,
                                       self.pages_per_seq, self.device)
        self.forward_calls = 0
        self.prefilled_tokens = 0     # prompt tokens run through prefill (cache hits excluded)

    # -- public -------------------------------------------------------------------------------
    def generate(self, requests: Seq[Request]) -> list[Completion]:
        for i, request in enumerate(requests):
            self._validate(request, i)
        seqs: list[Sequence] = []
        try:
            for request in requests:
                seqs.append(self._admit(request))
            with torch.inference_mode():
                for chunks in plan_prefill(seqs, self.chunk_size):
                    self.prefilled_tokens += sum(end - start for _, start, end in chunks)
                    self._run(build_step(chunks, self.page_size, self.device))
                while any(not seq.finished for seq in seqs):
                    self._decode([seq for seq in seqs if not seq.finished])
            for seq in seqs:
                written = seq.length - 1
                self.pool.commit(seq.tokens[:written], seq.pages)
        finally:
            for seq in seqs:
                self.pool.release(seq.pages)
        return [Completion(output_ids=tuple(seq.output), logprobs=tuple(seq.logprobs),
                           cached_tokens=seq.cached) for seq in seqs]

    def flush_cache(self) -> None:
        self.pool.flush()

    def close(self) -> None:
        self.graphs = None
        self.kv = []
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- internals ----------------------------------------------------------------------------
    def _validate(self, request: Request, index: int) -> None:
        name = f"requests[{index}]"
        prompt = request.prompt_ids
        if len(prompt) == 0:
            raise ValueError(f"{name}.prompt_ids: expected at least one token, got none")
        bad = [t for t in prompt if isinstance(t, bool) or not isinstance(t, int)
               or not 0 <= t < self.vocab]
        if bad:
            raise ValueError(f"{name}.prompt_ids: expected ints in [0, {self.vocab}), got "
                             f"{bad[:5]}")
        _positive_int(request.max_new_tokens, f"{name}.max_new_tokens")
        if not isinstance(request.logprobs_from, int) or request.logprobs_from < 0:
            raise ValueError(f"{name}.logprobs_from: expected an int >= 0, got "
                             f"{request.logprobs_from!r}")
        total = len(prompt) + request.max_new_tokens
        if total > self.max_seq_len:
            raise ValueError(f"{name}: prompt ({len(prompt)}) + max_new_tokens "
                             f"({request.max_new_tokens}) = {total} exceeds the engine's "
                             f"max_seq_len {self.max_seq_len}")

    def _admit(self, request: Request) -> Sequence:
        prompt = tuple(request.prompt_ids)
        first = max(request.logprobs_from, 1)
        # A cached position yields no logits: never cache past the first scored position's
        # context (position p is scored from row p - 1), and keep >= 1 token to prefill.
        limit = min(first - 1, len(prompt) - 1)
        cached_pages = self.pool.match(prompt, limit)
        self.pool.acquire(cached_pages)
        written = len(prompt) + request.max_new_tokens - 1
        needed = math.ceil(written / self.page_size) - len(cached_pages)
        try:
            fresh = self.pool.allocate(max(needed, 0))
        except Exception:
            self.pool.release(cached_pages)
            raise
        return Sequence(prompt=prompt, max_new_tokens=request.max_new_tokens,
                        first_logprob=first, pages=cached_pages + fresh,
                        cached=len(cached_pages) * self.page_size)

    def _decode(self, seqs: list[Sequence]) -> None:
        """Tokens for each of `seqs`: through a captured graph when one is large enough, as
        many steps as the batch keeps its rows (until its first sequence finishes) in one
        run (one upload, one download, no wait between steps), else one step eagerly like
        prefill."""
        if self.graphs is None or self.graphs.size_for(len(seqs)) is None:
            self._run(build_step(decode_chunks(seqs), self.page_size, self.device))
            return
        for tokens, values in self.graphs.decode(seqs, steps_left(seqs)):
            self.forward_calls += 1
            for seq, token, value in zip(seqs, tokens, values):
                seq.computed = seq.length           # the last token's K/V is now written
                seq.output.append(token)
                seq.logprobs.append(value)

    def _run(self, step: Step) -> None:
        logprobs = self.model.forward(step.batch, self.kv)
        self.forward_calls += 1
        greedy = torch.argmax(logprobs, dim=-1)
        targets = torch.tensor([-1 if row.target is None else row.target for row in step.rows],
                               dtype=torch.int64, device=logprobs.device)
        chosen = torch.where(targets >= 0, targets, greedy)
        values = logprobs.gather(1, chosen[:, None])[:, 0]
        for row, token, value in zip(step.rows, chosen.tolist(), values.tolist()):
            if row.target is None:
                row.seq.output.append(token)
            row.seq.logprobs.append(value)
        for seq, _, end in step.chunks:
            seq.computed = end
