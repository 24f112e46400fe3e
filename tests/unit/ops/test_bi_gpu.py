"""The batch-invariant ops on a GPU at Qwen3-8B's shapes (hidden 4096, 32/8 heads of 128,
vocab 151936): the CPU tests' invariances with compiled kernels, eager and under CUDA
Graph replay. Each comparison is torch.equal and has a positive control the same check
must flag."""

import pytest
import torch

from det_suite.models.catalog import model_dims
from det_suite.ops import run_kernel
from det_suite.ops.batch_invariant import (bf16_linear, log_softmax, paged_attention, rms_norm,
                                           write_kv)
from tests.unit.ops.op_controls import log_softmax_schedule_by_rows, normaliser_sensitive_logits

pytestmark = pytest.mark.gpu

DIMS = model_dims("qwen3-8b")

VOCAB = 151936  # Qwen3's vocabulary (config.json vocab_size)
PAGE = 16
BIG = 2048
SUBSETS = {"decode": slice(5, 6), "small": slice(100, 107), "block": slice(64, 128),
           "ragged": slice(1000, 1231)}


def _randn(*shape, scale=1.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=g, device="cuda") * scale).to(torch.bfloat16)


@pytest.fixture(scope="module")
def lm_head():
    return _randn(VOCAB, DIMS.hidden, scale=DIMS.hidden ** -0.5, seed=1)


@pytest.fixture(scope="module")
def hidden():
    return _randn(BIG, DIMS.hidden, seed=2)


def _split_k_for_small_calls(x, w):
    """Positive control: split-K for small M, halves added in fp32 (a different grouping)."""
    if x.shape[0] >= 64:
        return bf16_linear(x, w)
    half = x.shape[1] // 2
    parts = [torch.matmul(x[:, s].float(), w[:, s].float().T) for s in (slice(0, half),
                                                                         slice(half, None))]
    return (parts[0] + parts[1]).to(x.dtype)


@pytest.mark.parametrize("rows", list(SUBSETS.values()), ids=list(SUBSETS))
def test_lm_head_rows_equal_rows_of_a_bigger_call(lm_head, hidden, rows):
    assert torch.equal(bf16_linear(hidden, lm_head)[rows], bf16_linear(hidden[rows], lm_head))


def test_lm_head_control_is_flagged(lm_head, hidden):
    rows = SUBSETS["small"]
    assert not torch.equal(bf16_linear(hidden, lm_head)[rows],
                           _split_k_for_small_calls(hidden[rows], lm_head))


@pytest.mark.parametrize("rows", list(SUBSETS.values()), ids=list(SUBSETS))
@pytest.mark.parametrize("width", ["hidden", "head"])
def test_rms_norm_rows_equal_rows_of_a_bigger_call(hidden, rows, width):
    x = hidden if width == "hidden" else hidden.view(-1, DIMS.head_dim)[:BIG]
    w = _randn(x.shape[1], seed=3)
    assert torch.equal(rms_norm(x, w, 1e-6)[rows], rms_norm(x[rows], w, 1e-6))


# Random logits, and logits whose normaliser shows the sum's grouping (the control's input).
LOGITS = {"scale-4": lambda: _randn(256, VOCAB, scale=4, seed=4),
          "normaliser-sensitive": lambda: normaliser_sensitive_logits(256, VOCAB, seed=4,
                                                                      device="cuda")}


@pytest.mark.parametrize("logits", list(LOGITS.values()), ids=list(LOGITS))
@pytest.mark.parametrize("rows", [slice(5, 6), slice(10, 17), slice(64, 200)],
                         ids=["decode", "small", "ragged"])
def test_log_softmax_rows_equal_rows_of_a_bigger_call(rows, logits):
    x = logits()
    assert torch.equal(log_softmax(x)[rows], log_softmax(x[rows]))


def test_log_softmax_control_is_flagged():
    """The small call's rows in 16384-position slices of 512 lanes (the op: 4096 and 4096),
    on logits where the normaliser shows the sum's grouping (op_controls)."""
    logits = normaliser_sensitive_logits(256, VOCAB, seed=4, device="cuda")
    small = log_softmax_schedule_by_rows(1 << 14, 512)
    big, control = log_softmax(logits)[10:17], log_softmax(logits[10:17], launcher=small)
    rows_differ = int((big != control).any(dim=1).sum())
    print(f"log_softmax control: {rows_differ} of {big.shape[0]} rows differ")
    assert rows_differ > 0
    torch.testing.assert_close(control, big, rtol=0, atol=2e-5)  # still a log_softmax


# ------------------------------------------------------------------ attention

SEQ = 4096


class Cache:
    def __init__(self, requests, tokens):
        pages = -(-tokens // PAGE)
        self.k = torch.full((requests * pages, PAGE, DIMS.kv_heads, DIMS.head_dim),
                            float("nan"), dtype=torch.bfloat16, device="cuda")
        self.v = torch.full_like(self.k, float("nan"))
        perm = torch.randperm(requests * pages, generator=torch.Generator().manual_seed(0))
        self.tables = perm.view(requests, pages).to(torch.int32).cuda()

    def write(self, r, start, k, v):
        pos = torch.arange(start, start + k.shape[0], device="cuda")
        write_kv(k, v, self.k, self.v, self.tables[r, pos // PAGE].long() * PAGE + pos % PAGE)

    def attend(self, calls, launcher=run_kernel):
        q = torch.cat([rows for _r, _c, rows in calls])
        starts = torch.tensor([0] + [rows.shape[0] for *_x, rows in calls]).cumsum(0)
        out = paged_attention(q, self.k, self.v, self.tables[[r for r, _c, _q in calls]],
                              torch.tensor([c for _r, c, _q in calls], dtype=torch.int32,
                                           device="cuda"),
                              starts.to(torch.int32).cuda(), DIMS.head_dim ** -0.5,
                              launcher=launcher)
        return [out[a:b] for a, b in zip(starts.tolist(), starts.tolist()[1:])]


@pytest.fixture(scope="module")
def seq():
    return tuple(_randn(SEQ, h, DIMS.head_dim, seed=10 + i)
                 for i, h in enumerate((DIMS.heads, DIMS.kv_heads, DIMS.kv_heads)))


def _chunked(seq, chunk, launcher=run_kernel):
    q, k, v = seq
    cache, outs = Cache(1, SEQ), []
    for start in range(0, SEQ, chunk):
        stop = min(start + chunk, SEQ)
        cache.write(0, start, k[start:stop], v[start:stop])
        outs += cache.attend([(0, start, q[start:stop])], launcher)
    return torch.cat(outs)


@pytest.fixture(scope="module")
def whole(seq):
    return _chunked(seq, SEQ)


@pytest.mark.parametrize("chunk", [512, 1000])
def test_chunked_prefill_equals_one_prefill(seq, whole, chunk):
    assert torch.equal(whole, _chunked(seq, chunk))


def _decode(seq, steps, launcher=run_kernel):
    q, k, v = seq
    cache, first, outs = Cache(1, SEQ), SEQ - steps, []
    cache.write(0, 0, k[:first], v[:first])
    for pos in range(first, SEQ):
        cache.write(0, pos, k[pos:pos + 1], v[pos:pos + 1])
        outs += cache.attend([(0, pos, q[pos:pos + 1])], launcher)
    return torch.cat(outs)


def test_decode_equals_the_same_positions_in_a_prefill(seq, whole):
    assert torch.equal(whole[-8:], _decode(seq, 8))


def _kv_tile_by_call(kernel, call, args, keywords):
    if "BLOCK_KV" in keywords:  # not the split shape's combine kernel, which has no KV tile
        keywords = {**keywords, "BLOCK_KV": 16 if call.grid[0] <= 2 else 64}
    return run_kernel(kernel, call, args, keywords)


def test_attention_control_is_flagged(seq, whole):
    assert not torch.equal(whole[-8:], _decode(seq, 8, _kv_tile_by_call))


def test_request_unchanged_in_a_ragged_batch(seq):
    q, k, v = seq
    other = tuple(_randn(700, t.shape[1], DIMS.head_dim, seed=20 + i) for i, t in enumerate(seq))
    cache = Cache(2, SEQ)
    cache.write(0, 0, k, v)
    cache.write(1, 0, other[1], other[2])
    (alone,) = cache.attend([(0, 3000, q[3000:])])
    batched = cache.attend([(1, 650, other[0][650:]), (0, 3000, q[3000:])])[1]
    assert torch.equal(alone, batched)


@pytest.mark.graph
def test_graph_replay_of_a_decode_step_equals_eager_and_prefill(seq, whole, lm_head):
    """One decode step of 4 requests (norm, attention, lm_head, log_softmax) captured in a
    CUDA graph: its replay equals the eager step, and request 0's attention row equals the
    same position of the prefill."""
    q, k, v = seq
    cache, pos = Cache(4, SEQ), SEQ - 1
    for r in range(4):
        cache.write(r, 0, k, v)
    q_step = q[pos:pos + 1].repeat(4, 1, 1).contiguous()
    tables = cache.tables
    ctx = torch.full((4,), pos, dtype=torch.int32, device="cuda")
    starts = torch.arange(5, dtype=torch.int32, device="cuda")
    norm_w = _randn(DIMS.hidden, seed=5)

    def step():
        attn = paged_attention(q_step, cache.k, cache.v, tables, ctx, starts,
                               DIMS.head_dim ** -0.5)
        h = rms_norm(attn.reshape(4, -1)[:, :DIMS.hidden], norm_w, 1e-6)
        return attn, log_softmax(bf16_linear(h, lm_head))

    eager = step()  # also the warm-up before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(eager, captured))
    assert torch.equal(captured[0][0], whole[pos])
