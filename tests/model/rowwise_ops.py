"""A test-only op set that is batch-invariant by construction: every op runs one row (one
query) at a time through torch, so a row's bits can only depend on that row. Fast on the
CPU, it lets the engine's bookkeeping (batching, chunked prefill, cache reuse) be tested
for exactness without the Triton interpreter; det mode's own ops are tested separately."""

import dataclasses

import torch

from det_suite.engine.opsets import (stock_attention, stock_fp8_linear, stock_log_softmax,
                                     stock_opset, stock_rms_norm)


def _rows(fn, x, *args):
    flat = x.reshape(-1, x.shape[-1])
    out = torch.cat([fn(flat[i:i + 1], *args) for i in range(flat.shape[0])])
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _attention(q, k_cache, v_cache, block_tables, context_lens, query_starts, scale):
    out = torch.empty_like(q)
    starts, contexts = query_starts.tolist(), context_lens.tolist()
    for r in range(block_tables.shape[0]):
        for j in range(starts[r], starts[r + 1]):
            position = contexts[r] + j - starts[r]
            one = torch.tensor([position], dtype=torch.int32)
            pages = position // k_cache.shape[1] + 1    # a function of the position only
            out[j:j + 1] = stock_attention(q[j:j + 1], k_cache, v_cache,
                                           block_tables[r:r + 1, :pages],
                                           one, torch.tensor([0, 1], dtype=torch.int32), scale)
    return out


def rowwise_opset(name: str = "rowwise"):
    return dataclasses.replace(
        stock_opset(), name=name,
        fp8_linear=lambda x, lin: _rows(stock_fp8_linear, x, lin),
        bf16_linear=lambda x, w: _rows(torch.nn.functional.linear, x, w),
        rms_norm=lambda x, w, eps: _rows(stock_rms_norm, x, w, eps),
        attention=_attention,
        log_softmax=lambda x: _rows(stock_log_softmax, x))
