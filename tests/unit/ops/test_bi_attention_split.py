"""`paged_attention` past one segment: contexts cut into SEGMENT-sized segments, and decode
calls (T == R) launched in the split shape (a program per segment, then an ordered merge)
while every other call runs the tile kernel, which merges its segments in registers.

Bit-exact (torch.equal) at contexts around segment boundaries: a decode row through the
split shape equals the same query inside a prefill through the tile kernel; chunked prefill
equals one prefill; a request's rows do not depend on the rest of the call (other requests,
other launch shape); nothing outside a row's own K/V reaches it (NaN in unwritten cache
slots and in the workspace, a wider block table). Then accuracy against fp32 attention.
Positive control: a tile kernel that cuts segments elsewhere, which the decode comparison
must flag. With out_scale (the output quantized for the o projection) both shapes return
`quantize_fp8` of their output byte for byte, past a segment too. The GPU tests repeat the
invariances and the quantization at Qwen3-8B's head shapes, contexts 1..2100.
"""

import functools

import pytest
import torch

from det_suite.ops import quantize_fp8, run_kernel
from det_suite.ops.batch_invariant import ATTENTION_TILE, paged_attention, write_kv
from det_suite.ops.bi_launch_spec import attention_heads_per_program

SEG = ATTENTION_TILE["SEGMENT"]
SMALL = (4, 2, 16)      # (query heads, KV heads, head_dim)
PAGE = 16
LONG = 2 * SEG + 6      # three segments, the last partly filled
POSITIONS = {"first": 0, "seg-1": SEG - 1, "seg": SEG, "seg+1": SEG + 1, "2seg+5": 2 * SEG + 5}
TILE_KERNEL = ["bi_paged_attention_kernel"]
SPLIT_KERNELS = ["bi_paged_attention_split_kernel", "bi_paged_attention_combine_kernel"]


def _i32(values, device):
    return torch.tensor(values, dtype=torch.int32, device=device)


def _tokens(n, heads, seed, device):
    hq, hkv, d = heads
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, h, d, generator=g).to(torch.bfloat16).to(device)
                 for h in (hq, hkv, hkv))


class Cache:
    """A NaN-filled paged cache of `requests` x `pages` pages, each request's pages in a
    scattered, descending order."""

    def __init__(self, requests, tokens, heads, device, page=PAGE, spare_pages=0):
        _hq, hkv, d = heads
        self.page, self.heads = page, heads
        pages = -(-tokens // page) + spare_pages
        self.k = torch.full((requests * pages, page, hkv, d), float("nan"),
                            dtype=torch.bfloat16, device=device)
        self.v = torch.full_like(self.k, float("nan"))
        self.tables = torch.stack([torch.arange(pages) * requests + r for r in range(requests)]
                                  ).flip(1).to(torch.int32).to(device)

    def write(self, r, start, k, v):
        pos = torch.arange(start, start + k.shape[0], device=k.device)
        slots = self.tables[r, pos // self.page].long() * self.page + pos % self.page
        write_kv(k, v, self.k, self.v, slots)

    def attend(self, calls, launcher=run_kernel, tables=None, out_scale=None):
        """One paged_attention call over [(request, context, q rows)]; outputs per entry."""
        device = self.k.device
        q = torch.cat([rows for _r, _ctx, rows in calls])
        starts = [0]
        for _r, _ctx, rows in calls:
            starts.append(starts[-1] + rows.shape[0])
        tables = self.tables if tables is None else tables
        out = paged_attention(q, self.k, self.v, tables[[r for r, _c, _q in calls]],
                              _i32([ctx for _r, ctx, _q in calls], device),
                              _i32(starts, device), self.heads[2] ** -0.5,
                              out_scale=out_scale, launcher=launcher)
        return [out[a:b] for a, b in zip(starts, starts[1:])]


class Recorder:
    """A launcher that runs each launch and records its kernel's name."""

    def __init__(self, keywords=None):
        self.kernels, self.keywords = [], keywords or {}

    def __call__(self, kernel, call, args, keywords):
        self.kernels.append(call.kernel)
        return run_kernel(kernel, call, args, {**keywords, **self.keywords.get(call.kernel, {})})


def decode(cache, seq, position, launcher=run_kernel):
    """The query at `position` alone, as a decode step (its K/V already in the cache)."""
    (row,) = cache.attend([(0, position, seq[0][position:position + 1])], launcher)
    return row[0]


@functools.lru_cache(maxsize=None)
def _prefilled(length, heads, page, device):
    """(sequence, cache holding all of it, the one-call prefill's rows, its kernels)."""
    seq = _tokens(length, heads, 1, device)
    cache = Cache(1, length, heads, device, page)
    cache.write(0, 0, *seq[1:])
    recorder = Recorder()
    (whole,) = cache.attend([(0, 0, seq[0])], recorder)
    return seq, cache, whole, recorder.kernels


@pytest.fixture
def prefilled(device):
    return _prefilled(LONG, SMALL, PAGE, device)


# ------------------------------------------------------------------ decode == prefill

@pytest.mark.parametrize("position", list(POSITIONS.values()), ids=list(POSITIONS))
def test_split_decode_equals_the_tile_kernels_prefill_row(prefilled, position):
    seq, cache, whole, prefill_kernels = prefilled
    recorder = Recorder()
    row = decode(cache, seq, position, recorder)
    assert (prefill_kernels, recorder.kernels) == (TILE_KERNEL, SPLIT_KERNELS)
    assert torch.equal(row, whole[position])


# A decode program packs a KV head's query heads into one MMA tile (`bi_attention_split`):
# groups of 1 (no packing), 3 (not a power of two) and 4, and a group wider than the tile
# (BLOCK_Q 64) packed 40 heads at a time.
HEAD_SHAPES = {"group-4-dim-32": (8, 2, 32), "group-3": (6, 2, 16), "mha": (2, 2, 16),
               "group-80": (80, 1, 16)}


@pytest.mark.parametrize("heads", list(HEAD_SHAPES.values()), ids=list(HEAD_SHAPES))
def test_split_decode_equals_prefill_with_other_heads_and_odd_pages(device, heads):
    """Pages of 5 (a page straddles segment boundaries)."""
    seq, cache, whole, _kernels = _prefilled(SEG + 2, heads, 5, device)
    for position in (SEG - 1, SEG, SEG + 1):
        assert torch.equal(decode(cache, seq, position), whole[position]), position


def _assert_chunked_prefill_equals(whole, seq, length, heads, device, chunk):
    """A fresh cache prefilled `chunk` tokens at a time (each chunk attending to the ones
    before it through the cache) gives the one-call prefill's rows, bit for bit."""
    cache, outs = Cache(1, length, heads, device), []
    for start in range(0, length, chunk):
        stop = min(start + chunk, length)
        cache.write(0, start, seq[1][start:stop], seq[2][start:stop])
        outs += cache.attend([(0, start, seq[0][start:stop])])
    chunked = torch.cat(outs)
    assert torch.equal(whole, chunked), f"{int((whole != chunked).any(-1).sum())} rows differ"


@pytest.mark.parametrize("group, heads", [(1, 1), (3, 3), (4, 4), (7, 7), (64, 64), (80, 40),
                                          (128, 64), (67, 1)])
def test_a_program_packs_the_largest_divisor_of_the_group_that_fits_the_tile(group, heads):
    assert attention_heads_per_program(group) == heads


def test_a_group_below_one_is_refused_by_name():
    with pytest.raises(ValueError, match="group: expected"):
        attention_heads_per_program(0)


@pytest.mark.parametrize("chunk", [100, SEG + 44], ids=["chunk-100", "chunk-past-a-segment"])
def test_chunked_prefill_equals_one_prefill(prefilled, device, chunk):
    seq, _cache, whole, _kernels = prefilled
    _assert_chunked_prefill_equals(whole, seq, LONG, SMALL, device, chunk)


# ------------------------------------------------------------------ the rest of the call

@pytest.fixture
def shared_cache(prefilled, device):
    """Request 0 is the long sequence; requests 1 and 2 are others, short and past a
    segment."""
    seq = prefilled[0]
    others = [_tokens(n, SMALL, 10 + n, device) for n in (20, SEG + 30)]
    cache = Cache(3, LONG, SMALL, device)
    for r, (_q, k, v) in enumerate([seq, *others]):
        cache.write(r, 0, k, v)
    return cache, others


P = 2 * SEG + 5


@pytest.mark.parametrize("layout", ["decodes-first", "decodes-last", "with-a-prefill-chunk"])
def test_request_row_unchanged_by_the_rest_of_the_call(prefilled, shared_cache, layout):
    seq, _cache, whole, _kernels = prefilled
    cache, (short, past) = shared_cache
    mine = (0, P, seq[0][P:P + 1])
    if layout == "decodes-first":
        calls, at = [mine, (1, 7, short[0][7:8]), (2, SEG, past[0][SEG:SEG + 1])], 0
    elif layout == "decodes-last":
        calls, at = [(2, SEG + 29, past[0][SEG + 29:]), (1, 3, short[0][3:4]), mine], 2
    else:  # T != R: the whole call, this decode row included, runs the tile kernel
        calls, at = [(1, 19, short[0][19:]), mine, (2, SEG - 40, past[0][SEG - 40:])], 1
    recorder = Recorder()
    rows = cache.attend(calls, recorder)
    assert recorder.kernels == (TILE_KERNEL if layout == "with-a-prefill-chunk"
                                else SPLIT_KERNELS)
    assert torch.equal(rows[at][0], whole[P])


@pytest.mark.parametrize("empty", ["first", "last"])
def test_as_many_queries_as_requests_but_not_one_each(prefilled, shared_cache, empty):
    """T == R takes the split shape even when a request has no query and another two: each
    row still finds its own request and position."""
    seq, _cache, whole, _kernels = prefilled
    cache, _others = shared_cache
    nothing = (1, 5, seq[0][:0])
    two = (0, SEG, seq[0][SEG:SEG + 2])
    recorder = Recorder()
    rows = cache.attend([nothing, two] if empty == "first" else [two, nothing], recorder)
    assert recorder.kernels == SPLIT_KERNELS
    assert torch.equal(rows[1 if empty == "first" else 0], whole[SEG:SEG + 2])


# ------------------------------------------------------------------ nothing else reaches a row

def _nan_workspace(kernel, call, args, keywords):
    """Fill the split kernel's workspace with NaN first: the combine must read only the
    segments the split kernel wrote."""
    if call.kernel == SPLIT_KERNELS[0]:
        for (name, _arg), value in zip(call.args, args):
            if name in ("seg_stats_ptr", "seg_acc_ptr"):
                value.fill_(float("nan"))
    return run_kernel(kernel, call, args, keywords)


@pytest.mark.parametrize("stale", ["nan-past-the-position", "nan-workspace",
                                   "wider-block-table"])
def test_nothing_but_the_rows_keys_reaches_it(prefilled, device, stale):
    seq, cache, whole, _kernels = prefilled
    position = SEG + 1
    if stale == "nan-past-the-position":  # only keys 0..position written; NaN after
        cache = Cache(1, LONG, SMALL, device)
        cache.write(0, 0, seq[1][:position + 1], seq[2][:position + 1])
        row = decode(cache, seq, position)
    elif stale == "nan-workspace":
        row = decode(cache, seq, position, _nan_workspace)
    else:  # more columns: more segments in the split grid, their pages all NaN
        wide = Cache(1, LONG, SMALL, device, spare_pages=2 * SEG // PAGE)
        wide.write(0, 0, *seq[1:])
        row = decode(wide, seq, position)
    assert torch.equal(row, whole[position])


# ------------------------------------------------------------------ accuracy

def reference(seq, heads):
    """fp32 causal softmax attention of every query of the sequence."""
    hq, hkv, d = heads
    q, k, v = (t.float() for t in seq)
    k, v = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
    scores = torch.einsum("thd,shd->hts", q, k) * d ** -0.5
    n = q.shape[0]
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    return torch.einsum("hts,shd->thd", probs, v)


@pytest.mark.parametrize("shape", ["tile", "split"])
def test_matches_fp32_reference_across_segments(prefilled, shape):
    seq, cache, whole, _kernels = prefilled
    expected = reference(seq, SMALL)
    positions = list(POSITIONS.values())
    got = whole if shape == "tile" else torch.stack([decode(cache, seq, p) for p in positions])
    want = expected if shape == "tile" else expected[positions]
    # rtol: the output is rounded to bf16, half an ulp, at most 2**-8 of the value (up to
    # 7.5e-3 here, where |out| reaches 2.6). atol: probabilities are rounded to bf16 before
    # the PV product, each by at most 2**-9 of itself, so a row by at most 2**-9 * max|v|
    # (8.7e-3 for these |v| < 4.5) were every rounding the same way; they are not, and the
    # excess over rtol is 1.3e-3. The segment merge adds only fp32 rounding (~1e-7); a lost
    # or doubled segment is off by O(0.1).
    torch.testing.assert_close(got.float(), want, rtol=2 ** -8, atol=4e-3)


# ------------------------------------------------------------------ positive control

def test_control_tile_kernel_cutting_other_segments_is_flagged(prefilled):
    """The same chunk with the tile kernel's segments halved differs from the split
    decode: where the segments are cut shows in the bits, so the equalities above are
    evidence that both shapes cut them at the same positions."""
    seq, cache, whole, _kernels = prefilled
    start = P - 9
    recorder = Recorder({TILE_KERNEL[0]: {"SEGMENT": SEG // 2}})
    (rows,) = cache.attend([(0, start, seq[0][start:P + 1])], recorder)
    assert recorder.kernels == TILE_KERNEL
    assert not torch.equal(rows[-1], decode(cache, seq, P))


# ------------------------------------------------------------------ quantized for o_proj

OUT_SCALE = 0.0037  # saturates outputs past 1.66 in magnitude, rounds the rest


def _quantized(rows, out_scale):
    """quantize_fp8 of (T, Hq, D) rows as the o projection sees them, as bytes."""
    return quantize_fp8(rows.reshape(rows.shape[0], -1), out_scale).view(torch.uint8)


@pytest.mark.parametrize("shape", ["prefill-chunk", "decode"])
def test_quantized_output_past_a_segment_is_quantize_fp8_of_the_output(prefilled, shape):
    """Queries at positions in the third segment: the tile kernel merges three segments in
    registers, the split shape's combine merges three from the workspace, then each
    quantizes as it stores."""
    seq, cache, whole, _kernels = prefilled
    start = P - 9 if shape == "prefill-chunk" else P
    out_scale = torch.tensor([OUT_SCALE], device=whole.device)
    recorder = Recorder()
    (rows,) = cache.attend([(0, start, seq[0][start:P + 1])], recorder, out_scale=out_scale)
    assert recorder.kernels == (TILE_KERNEL if shape == "prefill-chunk" else SPLIT_KERNELS)
    assert torch.equal(rows.view(torch.uint8), _quantized(whole[start:P + 1], out_scale))


# ------------------------------------------------------------------ GPU, Qwen3-8B heads

QWEN3_8B = (32, 8, 128)
GPU_LEN = 2100  # contexts 1..2100: nine segments


@pytest.fixture(scope="module")
def gpu_prefilled():
    return _prefilled(GPU_LEN, QWEN3_8B, PAGE, "cuda")


@pytest.mark.gpu
def test_gpu_decode_at_every_context_equals_the_prefill(gpu_prefilled):
    seq, cache, whole, kernels = gpu_prefilled
    assert kernels == TILE_KERNEL
    differ = [p for p in range(GPU_LEN) if not torch.equal(decode(cache, seq, p), whole[p])]
    assert not differ, f"{len(differ)} positions differ, first {differ[:10]}"


@pytest.mark.gpu
def test_gpu_one_decode_call_of_every_context_equals_the_prefill(gpu_prefilled):
    """2100 requests in one decode call, request p at position p (all reading the one
    sequence's pages)."""
    seq, cache, whole, _kernels = gpu_prefilled
    tables = cache.tables.expand(GPU_LEN, -1)
    recorder = Recorder()
    rows = cache.attend([(p, p, seq[0][p:p + 1]) for p in range(GPU_LEN)], recorder, tables)
    assert recorder.kernels == SPLIT_KERNELS
    assert torch.equal(torch.cat(rows), whole)


@pytest.mark.gpu
@pytest.mark.parametrize("chunk", [256, 300, 1000])
def test_gpu_chunked_prefill_equals_one_prefill(gpu_prefilled, chunk):
    seq, _cache, whole, _kernels = gpu_prefilled
    _assert_chunked_prefill_equals(whole, seq, GPU_LEN, QWEN3_8B, "cuda", chunk)


@pytest.mark.gpu
def test_gpu_control_tile_kernel_cutting_other_segments_is_flagged(gpu_prefilled):
    seq, cache, whole, _kernels = gpu_prefilled
    recorder = Recorder({TILE_KERNEL[0]: {"SEGMENT": SEG // 2}})
    (halved,) = cache.attend([(0, 0, seq[0])], recorder)
    assert torch.equal(halved[:SEG // 2], whole[:SEG // 2])  # one segment either way
    assert not torch.equal(halved[SEG // 2:], whole[SEG // 2:])


GRAPH_POSITIONS = [SEG - 1, SEG, 2 * SEG + 5, GPU_LEN - 1]


def _graph_decode(gpu_prefilled, out_scale=None):
    """A decode call captured in a CUDA graph (the workspace allocated inside the capture),
    replayed at GRAPH_POSITIONS; its output."""
    seq, cache, _whole, _kernels = gpu_prefilled
    positions = GRAPH_POSITIONS
    q = torch.zeros(len(positions), *seq[0].shape[1:], dtype=seq[0].dtype, device="cuda")
    ctx = torch.zeros(len(positions), dtype=torch.int32, device="cuda")
    tables = cache.tables.expand(len(positions), -1).contiguous()
    starts = torch.arange(len(positions) + 1, dtype=torch.int32, device="cuda")

    def step():
        return paged_attention(q, cache.k, cache.v, tables, ctx, starts, QWEN3_8B[2] ** -0.5,
                               out_scale=out_scale)

    step()  # compile (and validate out_scale) before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    q.copy_(seq[0][positions])
    ctx.copy_(torch.tensor(positions, dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    return out


@pytest.mark.gpu
@pytest.mark.graph
def test_gpu_graph_replay_of_a_split_decode_equals_the_prefill(gpu_prefilled):
    """Replayed at contexts on both sides of segment boundaries."""
    whole = gpu_prefilled[2]
    assert torch.equal(_graph_decode(gpu_prefilled), whole[GRAPH_POSITIONS])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["prefill", "decode-of-every-context"])
def test_gpu_quantized_output_is_quantize_fp8_of_the_output(gpu_prefilled, shape):
    """The whole sequence as one prefill (tile kernel), or as 2100 decode requests in one
    call (split shape): byte for byte quantize_fp8 of the prefill's output."""
    seq, cache, whole, _kernels = gpu_prefilled
    out_scale = torch.tensor([OUT_SCALE], device="cuda")
    recorder = Recorder()
    if shape == "prefill":
        rows = cache.attend([(0, 0, seq[0])], recorder, out_scale=out_scale)
    else:
        rows = cache.attend([(p, p, seq[0][p:p + 1]) for p in range(GPU_LEN)], recorder,
                            cache.tables.expand(GPU_LEN, -1), out_scale=out_scale)
    assert recorder.kernels == (TILE_KERNEL if shape == "prefill" else SPLIT_KERNELS)
    assert torch.equal(torch.cat(rows).view(torch.uint8), _quantized(whole, out_scale))


@pytest.mark.gpu
@pytest.mark.graph
def test_gpu_graph_replay_of_a_quantized_split_decode(gpu_prefilled):
    whole = gpu_prefilled[2]
    out_scale = torch.tensor([OUT_SCALE], device="cuda")
    quantized = _graph_decode(gpu_prefilled, out_scale)
    assert torch.equal(quantized.view(torch.uint8),
                       _quantized(whole[GRAPH_POSITIONS], out_scale))
