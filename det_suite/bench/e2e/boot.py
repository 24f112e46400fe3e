"""What one boot measures, on a Backend it is handed: per cell, warm-up + N samples.

One sample is two requests on an empty cache, back to back after the thermal gate:
  1. the cell's batch with max_new_tokens=1: its time is the prefill (time to first token);
  2. flush, the same batch with the forced output length: end-to-end latency.
Decode time per step = (end-to-end - prefill) / (output tokens - 1). The engine exposes no
per-step timer, and the Backend interface (the same for the SGLang server) has only
requests, so both parts are timed from outside as whole requests; the prefill request also
pays the first token's sampling, exactly what the full request pays before its first
decode step.

Every request must report 0 cached tokens (the flush worked) and exactly the forced number
of output tokens; anything else stops the boot with an error, never a silently different
measurement.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Callable

import torch

from det_suite.backends.interface import Request


def cell_requests(seed: int, prefix: int, batch: int, vocab: int,
                  max_new_tokens: int) -> list[Request]:
    """The cell's batch: `batch` different prompts of `prefix` random token ids, the same in
    every boot and arm (seeded by the cell)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + prefix * 101 + batch)
    return [Request(tuple(torch.randint(0, vocab, (prefix,), generator=gen).tolist()),
                    max_new_tokens, logprobs_from=prefix)
            for _ in range(batch)]


def weight_bytes(checkpoint) -> int:
    """Bytes one decode step reads from the weights: every tensor but the embedding table
    (a decode step gathers one row of it per token)."""
    return sum(t.numel() * t.element_size() for name, t in checkpoint.state_dict().items()
               if name != "model.embed_tokens.weight")


def engine_limits(prefixes, batches, output_tokens: int, page_size: int) -> dict:
    """max_seq_len and num_pages that fit the largest cell twice over."""
    longest = max(prefixes) + output_tokens
    pages_per_seq = -(-longest // page_size)
    return {"max_seq_len": pages_per_seq * page_size,
            "num_pages": 2 * pages_per_seq * max(batches) + 1}


def _digest(completions) -> str:
    ids = b"".join(bytes(str(c.output_ids), "ascii") for c in completions)
    return hashlib.sha256(ids).hexdigest()[:16]


def _check(completions, want_tokens: int, what: str) -> None:
    for i, c in enumerate(completions):
        if c.cached_tokens:
            raise RuntimeError(f"{what}: request {i} reported {c.cached_tokens} cached tokens "
                               "after a cache flush; the timing would include a cache hit")
        if len(c.output_ids) != want_tokens:
            raise RuntimeError(f"{what}: request {i} returned {len(c.output_ids)} tokens, "
                               f"expected exactly {want_tokens} (forced output length)")


def run_boot(backend, plan: dict, *, vocab: int, gate,
             clock: Callable[[], float] = time.perf_counter,
             sync: Callable[[], None] = lambda: None,
             emit: Callable[[dict], None] = lambda event: None) -> list[dict]:
    """Every cell of `plan` (E2ESettings.plan()) on `backend`; returns every sample,
    warm-ups included (flagged). `sync` waits for the device (torch.cuda.synchronize)."""
    samples = []
    out_tokens = plan["output_tokens"]
    for prefix in plan["prefixes"]:
        for batch in plan["batches"]:
            prefill_batch = cell_requests(plan["seed"], prefix, batch, vocab, 1)
            full_batch = cell_requests(plan["seed"], prefix, batch, vocab, out_tokens)
            for i in range(plan["warmup"] + plan["samples"]):
                warmup = i < plan["warmup"]
                backend.flush_cache()
                gate_outcome = gate.wait()
                sync()
                t0 = clock()
                first = backend.generate(prefill_batch)
                sync()
                t1 = clock()
                backend.flush_cache()
                sync()
                t2 = clock()
                full = backend.generate(full_batch)
                sync()
                t3 = clock()
                after = gate.read()
                what = f"prefix {prefix} batch {batch} sample {i}"
                _check(first, 1, what + " (prefill request)")
                _check(full, out_tokens, what)
                prefill_ms, e2e_ms = (t1 - t0) * 1e3, (t3 - t2) * 1e3
                sample = {
                    "prefix": prefix, "batch": batch, "index": i, "warmup": warmup,
                    "prefill_ms": prefill_ms, "e2e_ms": e2e_ms,
                    "decode_ms_per_step": (e2e_ms - prefill_ms) / (out_tokens - 1),
                    "output_tokens": out_tokens, "output_sha256": _digest(full),
                    "gate": gate_outcome.as_dict(),
                    "after": after.as_dict() if after is not None else None,
                }
                samples.append(sample)
                emit({"event": "sample", **{k: sample[k] for k in
                                            ("prefix", "batch", "index", "warmup", "e2e_ms")},
                      "gate": gate_outcome.status})
    return samples
