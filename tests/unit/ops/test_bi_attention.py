"""`paged_attention`: causal attention of ragged queries over a paged KV cache.

Accuracy against an fp64 softmax over the gathered cache, then bit-exact invariance
(torch.equal): chunked prefill at two chunk sizes equals one prefill; a decode step equals
the same position inside a prefill; a request's rows are unchanged when batched with
other requests of other lengths, in any order. The cache starts full of NaN, so a key read
past a request's own positions would poison its rows. Positive control: the same kernels
with their KV tile chosen by the call (what a split-KV decode with its own tiles does),
which the chunking and decode comparisons must flag. With out_scale, the output quantized
for the o projection is byte for byte `quantize_fp8` of the unquantized output, from both
launch shapes, NaN included, and the instruction lint compiles those launches as they are
made (skipping them on a target without e4m3). Contexts past one attention segment and the decode call's
split shape: `test_bi_attention_split.py`.
"""

import pytest
import torch

from det_suite.kernels import registry
from det_suite.lint import op_kernels, specialize
from det_suite.lint.ptx_instructions import MmaInstruction
from det_suite.lint.worker import CompileOutcome
from det_suite.ops import quantize_fp8, run_kernel
from det_suite.ops.batch_invariant import paged_attention, write_kv
from tests.unit.lint.test_policy_lint import _recorded_job, _Recorder

HQ, HKV, D = 4, 2, 16
SCALE = D ** -0.5
PAGE = 8
MAX_PAGES = 24


def _i32(values, device):
    return torch.tensor(values, dtype=torch.int32, device=device)


class PagedCache:
    """A NaN-filled cache; request r owns pages in a scattered, descending order."""

    def __init__(self, requests, device, page=PAGE):
        self.page = page
        self.k = torch.full((requests * MAX_PAGES, page, HKV, D), float("nan"),
                            dtype=torch.bfloat16, device=device)
        self.v = torch.full_like(self.k, float("nan"))
        self.tables = torch.stack([torch.arange(MAX_PAGES) * requests + r
                                   for r in range(requests)]).flip(1).to(torch.int32).to(device)

    def write(self, r, start, k, v):
        pos = torch.arange(start, start + k.shape[0], device=k.device)
        slots = self.tables[r, pos // self.page].long() * self.page + pos % self.page
        write_kv(k, v, self.k, self.v, slots)


def _tokens(n, seed, device):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, h, D, generator=g).to(torch.bfloat16).to(device)
               for h in (HQ, HKV, HKV))
    return q, k, v


def attend(cache, calls, device, launcher=run_kernel, out_scale=None):
    """One paged_attention call over [(request, context, q rows)]; outputs per request."""
    q = torch.cat([rows for _r, _ctx, rows in calls])
    starts = [0]
    for _r, _ctx, rows in calls:
        starts.append(starts[-1] + rows.shape[0])
    out = paged_attention(q, cache.k, cache.v, cache.tables[[r for r, _c, _q in calls]],
                          _i32([ctx for _r, ctx, _q in calls], device), _i32(starts, device),
                          SCALE, out_scale=out_scale, launcher=launcher)
    return [out[a:b] for a, b in zip(starts, starts[1:])]


def prefill_in_chunks(seq, chunk, device, launcher=run_kernel):
    """A sequence's K/V written and attended `chunk` tokens at a time, into a fresh cache."""
    q, k, v = seq
    cache = PagedCache(1, device)
    outs = []
    for start in range(0, q.shape[0], chunk):
        stop = min(start + chunk, q.shape[0])
        cache.write(0, start, k[start:stop], v[start:stop])
        outs += attend(cache, [(0, start, q[start:stop])], device, launcher)
    return torch.cat(outs)


def reference(seq, context, first, count):
    """fp64 causal attention of queries first..first+count-1 (positions context+j)."""
    q, k, v = (t.double() for t in seq)
    group = HQ // HKV
    out = []
    for j in range(first, first + count):
        pos = context + j
        keys = k[:pos + 1].repeat_interleave(group, 1)
        vals = v[:pos + 1].repeat_interleave(group, 1)
        probs = (torch.einsum("hd,nhd->hn", q[j], keys) * SCALE).softmax(-1)
        out.append(torch.einsum("hn,nhd->hd", probs, vals))
    return torch.stack(out)


SEQ_LEN = 90  # spans two BLOCK_Q tiles and two KV tiles


@pytest.fixture
def seq(device):
    return _tokens(SEQ_LEN, 1, device)


@pytest.mark.parametrize("page", [8, 5], ids=["page-8", "page-5"])
def test_matches_fp64_reference_with_query_offset(device, page):
    q, k, v = _tokens(SEQ_LEN, 2, device)
    cache = PagedCache(1, device, page=page)
    cache.write(0, 0, k, v)
    (got,) = attend(cache, [(0, 60, q[60:])], device)  # 30 queries after 60 cached tokens
    # Probabilities are rounded to bf16 before the PV product (relative 2**-9) and the
    # output to bf16 (2**-8 of values of order 1): a few 1e-3.
    torch.testing.assert_close(got.double(), reference((q, k, v), 0, 60, 30).to(device),
                               rtol=0, atol=1.5e-2)


@pytest.mark.parametrize("chunk", [16, 37], ids=["chunk-16", "chunk-37"])
def test_chunked_prefill_equals_one_prefill(seq, device, chunk):
    whole, chunked = prefill_in_chunks(seq, SEQ_LEN, device), prefill_in_chunks(seq, chunk, device)
    assert torch.equal(whole, chunked), f"{int((whole != chunked).sum())} differ"


DECODE_STEPS = 6


def decode_last_steps(seq, device, launcher=run_kernel):
    """Prefill all but the last DECODE_STEPS tokens, then decode them one call each
    (K/V written one token ahead of each call, as an engine does)."""
    q, k, v = seq
    cache = PagedCache(1, device)
    first = q.shape[0] - DECODE_STEPS
    cache.write(0, 0, k[:first], v[:first])
    outs = []
    for pos in range(first, q.shape[0]):
        cache.write(0, pos, k[pos:pos + 1], v[pos:pos + 1])
        outs += attend(cache, [(0, pos, q[pos:pos + 1])], device, launcher)
    return torch.cat(outs)


def test_decode_steps_equal_the_same_positions_in_a_prefill(seq, device):
    whole = prefill_in_chunks(seq, SEQ_LEN, device)
    assert torch.equal(whole[-DECODE_STEPS:], decode_last_steps(seq, device))


def test_request_unchanged_when_batched_with_other_lengths(seq, device):
    q, k, v = seq
    others = [_tokens(n, 10 + n, device) for n in (7, 70)]
    cache = PagedCache(3, device)
    for r, (_q, kk, vv) in enumerate([seq, *others]):
        cache.write(r, 0, kk, vv)
    (alone,) = attend(cache, [(0, 40, q[40:])], device)
    first = attend(cache, [(0, 40, q[40:]), (1, 3, others[0][0][3:]), (2, 0, others[1][0])],
                   device)[0]
    last = attend(cache, [(2, 50, others[1][0][50:]), (1, 0, others[0][0]), (0, 40, q[40:])],
                  device)[-1]
    assert torch.equal(alone, first) and torch.equal(alone, last)


def _kv_tile_by_call(kernel, call, args, keywords):
    """Positive control: a small KV tile for short calls (a split-KV decode's choice), in
    the kernels that have one (not the split shape's combine)."""
    if "BLOCK_KV" in keywords and call.grid[0] <= 2:
        keywords = {**keywords, "BLOCK_KV": 16}
    return run_kernel(kernel, call, args, keywords)


@pytest.mark.parametrize("compare", ["chunked", "decode"])
def test_control_with_kv_tile_by_call_is_flagged(seq, device, compare):
    whole = prefill_in_chunks(seq, SEQ_LEN, device)
    if compare == "chunked":
        other = prefill_in_chunks(seq, 16, device, _kv_tile_by_call)
        assert not torch.equal(whole, other)
    else:
        other = decode_last_steps(seq, device, _kv_tile_by_call)
        assert not torch.equal(whole[-DECODE_STEPS:], other)


# ------------------------------------------------------------------ quantized for o_proj

# 0.0037: outputs past 1.66 in magnitude saturate at 448, the rest round on e4m3's grid
# (a scale that is no power of two, so the division rounds too).
OUT_SCALE = 0.0037
TILE_KERNEL = ["bi_paged_attention_kernel"]
SPLIT_KERNELS = ["bi_paged_attention_split_kernel", "bi_paged_attention_combine_kernel"]


def _recording(kernels):
    """A launcher that runs each launch and records its kernel's name."""
    def launch(kernel, call, args, keywords):
        kernels.append(call.kernel)
        return run_kernel(kernel, call, args, keywords)
    return launch


@pytest.fixture
def two_requests(seq, device):
    """Request 0 the sequence, request 1 another of 20 tokens, both wholly in the cache."""
    other = _tokens(20, 3, device)
    cache = PagedCache(2, device)
    for r, (_q, k, v) in enumerate([seq, other]):
        cache.write(r, 0, k, v)
    return cache, other


# Per call shape: its [(request, context, q rows)] from (sequence, other), and its kernels.
CALL_SHAPES = {
    "prefill": (lambda q, o: [(0, 60, q[60:]), (1, 0, o[:20])], TILE_KERNEL),
    "decode": (lambda q, o: [(0, 89, q[89:90]), (1, 12, o[12:13])], SPLIT_KERNELS),
}


def _bytes(t):
    return t.view(torch.uint8)  # NaN compares equal to itself as bytes


@pytest.mark.parametrize("shape", list(CALL_SHAPES))
def test_quantized_output_is_quantize_fp8_of_the_output(seq, two_requests, device, shape):
    cache, other = two_requests
    make_calls, expected_kernels = CALL_SHAPES[shape]
    calls = make_calls(seq[0], other[0])
    out_scale = torch.tensor([OUT_SCALE], device=device)
    plain = torch.cat(attend(cache, calls, device))
    kernels = []
    quantized = torch.cat(attend(cache, calls, device, _recording(kernels), out_scale))
    assert kernels == expected_kernels  # no quantization launch after them
    assert quantized.dtype == torch.float8_e4m3fn
    assert torch.equal(_bytes(quantized),
                       _bytes(quantize_fp8(plain.reshape(plain.shape[0], -1), out_scale)))


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # the interpreter's max
@pytest.mark.parametrize("shape", list(CALL_SHAPES))
def test_quantized_nan_row_stays_nan(seq, two_requests, device, shape):
    """A NaN query row of one head gives that row's head NaN (e4m3's NaN), nothing else."""
    cache, other = two_requests
    make_calls, _kernels = CALL_SHAPES[shape]
    q = seq[0].clone()
    q[89, 1, 3] = float("nan")  # the last query of request 0 in either shape, head 1
    calls = make_calls(q, other[0])
    out_scale = torch.tensor([OUT_SCALE], device=device)
    plain = torch.cat(attend(cache, calls, device))
    quantized = torch.cat(attend(cache, calls, device, out_scale=out_scale))
    nan = quantized.float().isnan().reshape(plain.shape)
    row = calls[0][2].shape[0] - 1
    assert nan[row, 1].all() and int(nan.sum()) == D
    assert torch.equal(_bytes(quantized),
                       _bytes(quantize_fp8(plain.reshape(plain.shape[0], -1), out_scale)))


# ------------------------------------------------------------------ the lint's FP8-output launches

@pytest.mark.parametrize("call", op_kernels.ATTENTION_CALLS,
                         ids=["T={} R={} page={}".format(*c) for c in op_kernels.ATTENTION_CALLS])
def test_lint_compiles_the_quantized_launches_as_the_op_makes_them(call):
    """The instruction lint's "fp8-out" launches are the ones a call with out_scale makes."""
    tokens, requests, page = call
    heads, dim = op_kernels.Q_HEADS, op_kernels.HEAD_DIM
    cache = torch.empty(op_kernels.CACHE_BLOCKS, page, op_kernels.KV_HEADS, dim,
                        dtype=torch.bfloat16)
    recorder = _Recorder()
    paged_attention(torch.empty(tokens, heads, dim, dtype=torch.bfloat16), cache, cache,
                    torch.zeros(requests, op_kernels.MAX_BLOCKS, dtype=torch.int32),
                    torch.zeros(requests, dtype=torch.int32),
                    torch.linspace(0, tokens, requests + 1).to(torch.int32), dim ** -0.5,
                    out_scale=torch.ones(1), launcher=recorder)
    label = "T={} R={} page={} fp8-out".format(*call)
    for recorded in recorder.calls:
        kernel = recorded[1].kernel
        linted = dict(op_kernels.op_kernel_launches(kernel))[label]
        assert _recorded_job(recorded) == specialize(linted, registry.entry(kernel).module,
                                                     kernel, 90)


UNSUPPORTED = CompileOutcome(ok=False, instructions=[],
                             error="type fp8e4nv not supported in this architecture")
MMA_SYNC = MmaInstruction(family="mma.sync", opcode="mma.sync.aligned.m16n8k16.f32.bf16",
                          m=16, n=8, k_step=16, a_type="bf16", b_type="bf16", acc_type="f32")


@pytest.mark.parametrize("unsupported, status", [("fp8-out", "ok"), ("every", "violation")],
                         ids=["fp8-out-launches", "every-launch"])
def test_lint_skips_launches_a_pre_fp8_target_cannot_compile(unsupported, status):
    """On sm_80 (no e4m3) the FP8-output launches cannot compile, and no FP8 linear runs
    there to take them: reported, not linted. A kernel none of whose launches compile is
    still a violation."""
    kernel = registry.entry("bi_paged_attention_kernel")
    jobs = op_kernels.op_kernel_jobs(kernel, 80)
    outcomes = {job.key: UNSUPPORTED if unsupported == "every" or label.endswith(" fp8-out")
                else CompileOutcome(ok=True, instructions=[MMA_SYNC]) for label, job in jobs}
    result, violations = op_kernels.lint_op_kernel(kernel, 80, outcomes)
    assert (result.status, bool(violations)) == (status, status == "violation")
    if status == "ok":
        fp8_out = sum(label.endswith(" fp8-out") for label, _job in jobs)
        assert result.summary.endswith(f"({fp8_out} launches unsupported here)")


# ------------------------------------------------------------------ bad input

def _call(**change):
    args = dict(q=torch.zeros(3, HQ, D, dtype=torch.bfloat16),
                k_cache=torch.zeros(4, PAGE, HKV, D, dtype=torch.bfloat16),
                v_cache=torch.zeros(4, PAGE, HKV, D, dtype=torch.bfloat16),
                block_tables=_i32([[0, 1]], "cpu"), context_lens=_i32([2], "cpu"),
                query_starts=_i32([0, 3], "cpu"), scale=SCALE)
    args.update(change)
    return lambda: paged_attention(**args)


@pytest.mark.parametrize("call, error, match", [
    (_call(q=torch.zeros(3, HQ, D)), TypeError, "q must have dtype"),
    (_call(k_cache=torch.zeros(4, PAGE, HKV, D, dtype=torch.float16)), TypeError, "k_cache"),
    (_call(q=torch.zeros(3, 3, D, dtype=torch.bfloat16)), ValueError, "multiple of"),
    (_call(q=torch.zeros(3, HQ, 12, dtype=torch.bfloat16)), ValueError, "head_dim"),
    (_call(context_lens=torch.tensor([2])), TypeError, "context_lens must have dtype int32"),
    (_call(query_starts=_i32([0, 2], "cpu")), ValueError, "run from 0 to q's T=3"),
    (_call(context_lens=_i32([20], "cpu")), ValueError, "needs 3 blocks"),
    (_call(block_tables=_i32([[0, 9]], "cpu"), context_lens=_i32([10], "cpu")), ValueError,
     "outside 0..3"),
    (_call(scale=0.0), ValueError, "scale must be"),
    (_call(out_scale=0.5), TypeError, "out_scale must be a torch.Tensor"),
    (_call(out_scale=torch.ones(1, dtype=torch.bfloat16)), TypeError,
     "out_scale must have dtype float32"),
    (_call(out_scale=torch.ones(2)), ValueError, "out_scale must hold exactly one element"),
    (_call(out_scale=torch.zeros(1)), ValueError, "out_scale must be finite and positive"),
], ids=["q-dtype", "cache-dtype", "gqa-heads", "head-dim", "index-dtype", "query-starts",
        "too-few-blocks", "block-out-of-range", "scale", "out-scale-not-a-tensor",
        "out-scale-dtype", "out-scale-two-elements", "out-scale-zero"])
def test_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
