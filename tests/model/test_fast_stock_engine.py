"""The fast stock arm in the engine: on the tiny model it computes what the stock control
computes (same greedy tokens, logprobs within the FP8 rounding a one-ulp change can flip),
prefill, decode and a cache hit alike; on a GPU, eager and CUDA Graph decode agree."""

import pytest
import torch

from det_suite.backends.interface import Request
from det_suite.engine import Engine

pytestmark = pytest.mark.model

# Tolerance: the tiny random model's FP8 activations turn a one-ulp BF16 change (split-KV
# order, a stacked GEMM) into a whole FP8 step in the next linear; det against stock on the
# same prompts moves logprobs by 0.15, so 0.5 separates "the same model" from a wrong one.
TOLERANCE = 0.5


def _prompts(vocab, lengths=(70, 9)):
    gen = torch.Generator().manual_seed(0)
    return [Request(tuple(torch.randint(0, vocab, (n,), generator=gen).tolist()), 4,
                    logprobs_from=1) for n in lengths]


def _generate(ckpt, mode, device, requests, **options):
    engine = Engine(ckpt, mode=mode, page_size=4, max_seq_len=192, num_pages=200,
                    device=device, **options)
    first = engine.generate(requests)
    # Every prompt's pages are now cached: asked for its last logprobs only, a hit.
    again = engine.generate([Request(r.prompt_ids, r.max_new_tokens,
                                     logprobs_from=len(r.prompt_ids) - 1) for r in requests])
    return first, again


def test_fast_stock_computes_what_the_stock_control_computes(tiny, kernel_device):
    requests = _prompts(tiny.config.vocab_size)
    fast, fast_hit = _generate(tiny, "fast-stock", kernel_device, requests)
    stock, _ = _generate(tiny, "stock", kernel_device, requests)
    assert all(c.cached_tokens > 0 for c in fast_hit)
    for a, b in zip(stock, fast):
        assert a.output_ids == b.output_ids
        delta = (torch.tensor(a.logprobs) - torch.tensor(b.logprobs)).abs().max()
        assert len(a.logprobs) == len(b.logprobs) and delta < TOLERANCE, delta
    for a, b in zip(fast, fast_hit):
        assert a.output_ids == b.output_ids
        assert (torch.tensor(a.logprobs[-5:]) - torch.tensor(b.logprobs)).abs().max() \
            < TOLERANCE


@pytest.mark.gpu
@pytest.mark.graph
def test_fast_stock_graph_decode_agrees_with_eager_on_the_gpu(tiny):
    requests = _prompts(tiny.config.vocab_size, (70, 9, 130))
    eager, _ = _generate(tiny, "fast-stock", "cuda", requests)
    graph, _ = _generate(tiny, "fast-stock", "cuda", requests, cuda_graph=True)
    for a, b in zip(eager, graph):
        assert a.output_ids == b.output_ids
        assert (torch.tensor(a.logprobs) - torch.tensor(b.logprobs)).abs().max() < TOLERANCE
