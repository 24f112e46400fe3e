"""The embedded engine on the tiny synthetic model: batching, chunked prefill, real KV reuse
on a prefix-cache hit, forced output length, the forward against transformers, bad input.

Bookkeeping tests run with a row-at-a-time op set (`rowwise_ops`), invariant by
construction, so any difference they see is the engine's (wrong KV, wrong positions, a
padding effect), not a kernel's; det mode's own kernels are tested in test_cache_hit.py and
by the GPU tests."""

import dataclasses

import pytest
import torch

from det_suite.backends.interface import Request
from det_suite.engine import Engine
from det_suite.engine.prefix_cache import CacheFullError
from tests.model.rowwise_ops import rowwise_opset

pytestmark = pytest.mark.model

PAGE = 4


def _prompt(seed: int, length: int, vocab: int = 200) -> tuple[int, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, vocab, (length,), generator=gen).tolist())


@pytest.fixture(scope="module")
def rowwise():
    return rowwise_opset()


def _engine(tiny, ops, **options):
    options = {"page_size": PAGE, "max_seq_len": 64, "num_pages": 64, **options}
    return Engine(tiny, mode="stock", ops=ops, **options)


def _bits(completion) -> tuple:
    return completion.output_ids, torch.tensor(completion.logprobs, dtype=torch.float32)


def _assert_same_bits(a, b) -> None:
    assert a.output_ids == b.output_ids
    assert torch.equal(_bits(a)[1], _bits(b)[1]), "logprobs differ in their bits"


@pytest.mark.parametrize("chunk_size, lengths, cached, expected", [
    pytest.param(None, (5, 3), (0, 0), [[(0, 0, 5), (1, 0, 3)]], id="one-call"),
    pytest.param(4, (5, 3), (0, 0), [[(0, 0, 4)], [(0, 4, 5), (1, 0, 3)]],
                 id="split-and-packed"),
    pytest.param(3, (3, 3), (0, 0), [[(0, 0, 3)], [(1, 0, 3)]], id="exact-fit"),
    pytest.param(4, (6, 2), (4, 0), [[(0, 4, 6), (1, 0, 2)]], id="cached-tokens-skipped"),
])
def test_prefill_plan_packs_requests_in_order_within_the_chunk_size(chunk_size, lengths,
                                                                    cached, expected):
    from det_suite.engine.scheduler import Sequence, plan_prefill

    seqs = [Sequence(prompt=tuple(range(n)), max_new_tokens=1, first_logprob=1, pages=[],
                     cached=c) for n, c in zip(lengths, cached)]
    calls = plan_prefill(seqs, chunk_size)
    assert [[(seqs.index(s), a, b) for s, a, b in call] for call in calls] == expected


def test_batched_ragged_requests_equal_each_request_alone(tiny, rowwise):
    requests = [Request(_prompt(1, 9), 3, logprobs_from=2), Request(_prompt(2, 14), 2),
                Request(_prompt(3, 5), 4, logprobs_from=3)]
    engine = _engine(tiny, rowwise)
    together = engine.generate(requests)
    for request, batched in zip(requests, together):
        engine.flush_cache()
        _assert_same_bits(engine.generate([request])[0], batched)


@pytest.mark.parametrize("chunk_size", [1, 3, 7], ids=lambda c: f"chunk{c}")
def test_chunked_prefill_equals_one_shot_prefill(tiny, rowwise, chunk_size):
    requests = [Request(_prompt(4, 11), 2, logprobs_from=1), Request(_prompt(5, 6), 2)]
    whole_engine = _engine(tiny, rowwise)
    whole = whole_engine.generate(requests)
    chunked_engine = _engine(tiny, rowwise, chunk_size=chunk_size)
    chunked = chunked_engine.generate(requests)
    assert chunked_engine.forward_calls > whole_engine.forward_calls   # prefill was split
    for a, b in zip(whole, chunked):
        _assert_same_bits(a, b)


def test_hit_prefills_only_the_uncached_suffix_and_matches_cold(tiny, rowwise):
    prefix = _prompt(6, 12)
    target = Request(prefix + _prompt(7, 5), 3, logprobs_from=len(prefix))
    engine = _engine(tiny, rowwise)
    cold = engine.generate([target])[0]
    engine.flush_cache()
    engine.generate([Request(prefix + _prompt(8, 3), 1)])       # primes the prefix
    before = engine.prefilled_tokens
    hit = engine.generate([target])[0]
    assert cold.cached_tokens == 0
    assert hit.cached_tokens == 8     # full pages before position 11, whose logits are needed
    assert engine.prefilled_tokens - before == len(target.prompt_ids) - hit.cached_tokens
    _assert_same_bits(cold, hit)


def test_cache_never_covers_a_position_whose_logprob_is_asked_for(tiny, rowwise):
    prompt = _prompt(9, 16)
    engine = _engine(tiny, rowwise)
    engine.generate([Request(prompt, 1)])
    assert engine.generate([Request(prompt, 1, logprobs_from=1)])[0].cached_tokens == 0
    assert engine.generate([Request(prompt, 1, logprobs_from=6)])[0].cached_tokens == 4
    assert engine.generate([Request(prompt, 1, logprobs_from=16)])[0].cached_tokens == 12


@pytest.mark.parametrize("max_new, logprobs_from", [(1, 0), (4, 0), (3, 5)],
                         ids=["one-token", "four-tokens", "logprobs-from-5"])
def test_output_length_is_forced_and_every_asked_position_is_scored(tiny, rowwise, max_new,
                                                                    logprobs_from):
    prompt = _prompt(10, 9)
    out = _engine(tiny, rowwise).generate([Request(prompt, max_new,
                                                   logprobs_from=logprobs_from)])[0]
    assert len(out.output_ids) == max_new                    # EOS or not
    assert len(out.logprobs) == len(prompt) - max(logprobs_from, 1) + max_new


def test_flush_drops_reuse(tiny, rowwise):
    prompt = _prompt(11, 12)
    engine = _engine(tiny, rowwise)
    engine.generate([Request(prompt, 1, logprobs_from=12)])
    assert engine.generate([Request(prompt, 1, logprobs_from=12)])[0].cached_tokens == 8
    engine.flush_cache()
    assert engine.generate([Request(prompt, 1, logprobs_from=12)])[0].cached_tokens == 0


def test_eviction_under_a_small_cache_keeps_results_exact(tiny, rowwise):
    prompts = [_prompt(20 + i, 10) for i in range(4)]
    roomy = _engine(tiny, rowwise)
    tight = _engine(tiny, rowwise, num_pages=5)               # 4 usable pages: evicts
    for prompt in prompts + prompts[:1]:
        request = Request(prompt, 2, logprobs_from=9)
        _assert_same_bits(roomy.generate([request])[0], tight.generate([request])[0])
    assert tight.pool.stats().in_use == 0


def test_a_batch_larger_than_the_cache_is_refused_by_name(tiny, rowwise):
    engine = _engine(tiny, rowwise, num_pages=4)
    with pytest.raises(CacheFullError, match="num_pages"):
        engine.generate([Request(_prompt(30, 12), 2), Request(_prompt(31, 12), 2)])
    assert engine.pool.stats().in_use == 0                    # nothing leaked


def test_forward_agrees_with_transformers_without_activation_quantization(tiny):
    """The engine's forward (RoPE, GQA, causal offset, norms, residuals) against transformers'
    fp32 forward of the dequantized checkpoint, with FP8 linears replaced by the same
    dequantized BF16 product, so only BF16 activation rounding separates them. Tolerance:
    BF16 carries 8 mantissa bits; over 2 layers that moves logprobs by ~1e-2, where a wrong
    position or mask moves them by > 0.3."""
    from det_suite.engine.opsets import stock_opset
    from det_suite.models.reference import reference_logprobs

    def dequantized(x, lin):
        return (x.float() @ (lin.weight.float() * lin.weight_scale).t()).to(x.dtype)

    ops = dataclasses.replace(stock_opset(), fp8_linear=dequantized)
    prompt = _prompt(12, 20)
    engine = _engine(tiny, ops, chunk_size=7)          # chunked: offsets inside a request
    out = engine.generate([Request(prompt, 3, logprobs_from=1)])[0]
    reference = reference_logprobs(tiny, list(prompt) + list(out.output_ids))
    delta = (torch.tensor(out.logprobs) - reference).abs().max().item()
    print(f"max |engine - transformers| = {delta:.3g} over {len(out.logprobs)} logprobs")
    assert delta < 0.1


@pytest.mark.parametrize("request_, match", [
    pytest.param(Request((), 1), "prompt_ids", id="empty-prompt"),
    pytest.param(Request((1, 99999), 1), "prompt_ids", id="id-outside-vocab"),
    pytest.param(Request((1, 2), 0), "max_new_tokens", id="zero-new-tokens"),
    pytest.param(Request((1, 2), 1, logprobs_from=-1), "logprobs_from", id="negative-from"),
    pytest.param(Request(tuple(range(60)), 8), "max_seq_len", id="too-long"),
])
def test_bad_requests_are_refused_by_name(tiny, rowwise, request_, match):
    with pytest.raises(ValueError, match=match):
        _engine(tiny, rowwise).generate([request_])


@pytest.mark.parametrize("options, match", [
    pytest.param({"mode": "fast"}, "mode", id="unknown-mode"),
    pytest.param({"page_size": 0}, "page_size", id="zero-page-size"),
    pytest.param({"chunk_size": 0}, "chunk_size", id="zero-chunk"),
    pytest.param({"cuda_graph": True}, "CUDA", id="graph-on-cpu"),
])
def test_bad_engine_options_are_refused_by_name(tiny, options, match):
    with pytest.raises(ValueError, match=match):
        Engine(tiny, **{"mode": "stock", "max_seq_len": 64, **options})


# -- on a GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.graph
@pytest.mark.parametrize("mode", ["det", "stock"])
def test_graph_decode_equals_eager_decode_for_padded_batches(tiny, mode):
    """Batches of 3 and 5 replay the graphs captured for 4 and 8 with padding rows. det mode
    must give eager's bits; stock mode is measured the same way and only printed."""
    requests = [Request(_prompt(40 + i, 6 + 3 * i), 4, logprobs_from=2) for i in range(5)]
    eager = Engine(tiny, mode=mode, page_size=8, max_seq_len=128, device="cuda")
    graph = Engine(tiny, mode=mode, page_size=8, max_seq_len=128, device="cuda",
                   cuda_graph=True, graph_batch_sizes=(1, 2, 4, 8))
    differing = 0
    for count in (1, 3, 5):
        for a, b in zip(eager.generate(requests[:count]), graph.generate(requests[:count])):
            same = a.output_ids == b.output_ids and torch.equal(_bits(a)[1], _bits(b)[1])
            differing += not same
            if mode == "det":
                _assert_same_bits(a, b)
    print(f"{mode}: {differing} of 9 completions differ between graph and eager decode")


@pytest.mark.gpu
def test_det_mode_agrees_with_the_fp32_reference(tiny):
    """det mode (FP8 activations, BF16 activations between ops) against transformers' fp32
    forward of the dequantized checkpoint (no activation quantization). Tolerance: e4m3
    activations carry 3 mantissa bits (relative error up to 2**-4 per value); on the tiny
    model the CPU stock path sits 0.31 away at most, so 0.5 separates rounding from a wrong
    forward (which moves logprobs by whole units)."""
    from det_suite.models.reference import reference_logprobs

    prompt = _prompt(50, 24)
    engine = Engine(tiny, mode="det", page_size=8, max_seq_len=64, device="cuda")
    out = engine.generate([Request(prompt, 4, logprobs_from=1)])[0]
    reference = reference_logprobs(tiny, list(prompt) + list(out.output_ids))
    delta = (torch.tensor(out.logprobs) - reference).abs()
    print(f"det vs fp32 reference: max {delta.max():.3g}, mean {delta.mean():.3g} "
          f"over {delta.numel()} logprobs")
    assert delta.max() < 0.5


# -- graph decode's static buffers, replayed eagerly on the CPU (capture=False) ---------------

def _static_graphs(engine, sizes):
    """Graph decode's packed inputs, padding rows and in-graph pick, without the capture
    itself (the GPU tests above capture)."""
    from det_suite.engine.graphs import DecodeGraphs

    engine.graphs = DecodeGraphs(engine.model.forward, engine.kv, sizes,
                                 engine.pages_per_seq, "cpu", capture=False)
    return engine


def _assert_same_completion(a, b) -> None:
    assert (a.output_ids, a.cached_tokens) == (b.output_ids, b.cached_tokens)
    bits = [torch.tensor(c.logprobs, dtype=torch.float64).view(torch.int64) for c in (a, b)]
    assert torch.equal(*bits), "logprobs differ in their bits"


@pytest.mark.parametrize("sizes, new_tokens", [
    pytest.param((1, 2, 4, 8), (3, 3, 3), id="3-rows-padded-to-4"),
    pytest.param((1, 2, 4, 8), (3, 3, 3, 3, 3), id="5-rows-padded-to-8"),
    pytest.param((2,), (3, 3), id="exact-size"),
    pytest.param((1, 2), (2, 4, 6), id="3-rows-eager-then-graphs-as-rows-finish"),
])
def test_static_graph_decode_equals_eager_decode(tiny, rowwise, sizes, new_tokens):
    requests = [Request(_prompt(60 + i, 5 + 2 * i), n, logprobs_from=3)
                for i, n in enumerate(new_tokens)]
    eager = _engine(tiny, rowwise)
    graph = _static_graphs(_engine(tiny, rowwise), sizes)
    for a, b in zip(eager.generate(requests), graph.generate(requests)):
        _assert_same_completion(a, b)
    assert graph.forward_calls == eager.forward_calls


def test_static_graph_decode_keeps_prefix_cache_accounting(tiny, rowwise):
    prefix = _prompt(65, 9)
    rounds = [[Request(prefix + _prompt(66, 2), 3), Request(_prompt(67, 5), 2)],
              [Request(prefix + _prompt(68, 3), 4, logprobs_from=10),
               Request(prefix, 2, logprobs_from=9)]]
    eager = _engine(tiny, rowwise)
    graph = _static_graphs(_engine(tiny, rowwise), (1, 2))
    for requests in rounds:
        for a, b in zip(eager.generate(requests), graph.generate(requests)):
            _assert_same_completion(a, b)
        assert graph.pool.stats() == eager.pool.stats()
    assert [c.cached_tokens for c in graph.generate(rounds[1])] == [8, 8]


def test_a_graph_decode_run_uploads_once_and_downloads_once(tiny, rowwise, monkeypatch):
    """A run's only host/device crossings are DecodeInputs.upload (pinned -> device) and
    .download (device -> pinned), however many steps it holds; the eager step builder runs
    for prefill only."""
    from det_suite.engine import engine as engine_module
    from det_suite.engine.graphs import DecodeInputs

    calls = {"build_step": 0, "upload": 0, "download": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(engine_module, "build_step", counted("build_step",
                                                             engine_module.build_step))
    for name in ("upload", "download"):
        monkeypatch.setattr(DecodeInputs, name, counted(name, getattr(DecodeInputs, name)))
    engine = _static_graphs(_engine(tiny, rowwise), (1, 2, 4))
    engine.generate([Request(_prompt(70, 6), 4), Request(_prompt(71, 9), 4)])
    assert calls == {"build_step": 1, "upload": 1, "download": 1}   # 1 prefill, 1 run of 3
    assert engine.forward_calls == 4


def test_a_graph_decode_run_lasts_until_the_first_sequence_finishes(tiny, rowwise, monkeypatch):
    from det_suite.engine.graphs import DecodeGraphs

    runs = []
    decode = DecodeGraphs.decode

    def recorded(self, seqs, steps=1):
        runs.append((len(seqs), steps))
        return decode(self, seqs, steps)

    monkeypatch.setattr(DecodeGraphs, "decode", recorded)
    engine = _static_graphs(_engine(tiny, rowwise), (1, 2, 4))
    engine.generate([Request(_prompt(72, 5), 3), Request(_prompt(73, 4), 6),
                     Request(_prompt(74, 3), 2)])
    assert runs == [(3, 1), (2, 1), (1, 3)]


@pytest.mark.gpu
@pytest.mark.graph
def test_a_captured_decode_run_copies_once_each_way_however_many_steps(tiny):
    """Counted by CUPTI: a generate call with 4 more decode steps than another (one run
    each) makes no more host-to-device and no more device-to-host copies."""
    from torch.profiler import ProfilerActivity, profile

    engine = Engine(tiny, mode="det", page_size=8, max_seq_len=128, device="cuda",
                    cuda_graph=True, graph_batch_sizes=(1, 2))

    def copies(new_tokens: int) -> tuple[int, int]:
        engine.flush_cache()
        requests = [Request(_prompt(80, 12), new_tokens), Request(_prompt(81, 7), new_tokens)]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            engine.generate(requests)
            torch.cuda.synchronize()
        names = [event.name for event in prof.events()]
        return sum("HtoD" in n for n in names), sum("DtoH" in n for n in names)

    copies(6)                                                  # warm: compiles, allocates
    short, long = copies(2), copies(6)
    print(f"memcpys (HtoD, DtoH): {short} with 1 decode step, {long} with 5")
    assert long == short
