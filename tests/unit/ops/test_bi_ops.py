"""The batch-invariant row ops: `bf16_linear` (lm_head), `rms_norm`, `log_softmax`.

Each is checked for accuracy against a torch fp64/fp32 reference, and for bit-exact
invariance: the rows of a small call equal (torch.equal) the same rows inside a bigger
call. Every invariance comparison has a positive control: the same kernel with its tile
chosen by the number of rows (what an M-dependent schedule does), which the same
comparison must flag, or the check could not fail.
"""

import pytest
import torch

from det_suite.ops import run_kernel
from det_suite.ops.batch_invariant import bf16_linear, log_softmax, rms_norm
from tests.unit.ops.op_controls import log_softmax_schedule_by_rows


def tile_by_rows(**small_call_tile):
    """A launcher that runs the kernel with `small_call_tile` constexprs: the positive
    control's tile for the small call, where the big call keeps the op's own."""
    def launcher(kernel, call, args, keywords):
        return run_kernel(kernel, call, args, {**keywords, **small_call_tile})
    return launcher


def _rows_of_bigger_call(op, big, rows, **control):
    """(rows of op(big), op(big[rows])), the small call with a control tile if given."""
    launcher = tile_by_rows(**control) if control else run_kernel
    return op(big)[rows], op(big[rows], launcher=launcher)


ROW_SUBSETS = {"one-row-decode": slice(3, 4), "suffix": slice(9, 23), "prefix": slice(0, 17)}


# ------------------------------------------------------------------ bf16_linear

@pytest.fixture
def linear_operands(device):
    g = torch.Generator().manual_seed(12)
    x = torch.randn(23, 96, generator=g).to(torch.bfloat16).to(device)
    w = (torch.randn(200, 96, generator=g) / 96 ** 0.5).to(torch.bfloat16).to(device)
    bias = torch.randn(200, generator=g).to(torch.bfloat16).to(device)
    return x, w, bias


@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_bf16_linear_matches_fp64(linear_operands, with_bias):
    x, w, bias = linear_operands
    b = bias if with_bias else None
    ref = x.double() @ w.double().T + (b.double() if with_bias else 0)
    got = bf16_linear(x, w, b)
    # One bf16 rounding of the output (relative 2**-8) dominates; fp32 accumulation over
    # K = 96 adds ~1e-6.
    torch.testing.assert_close(got.double(), ref, rtol=2 ** -8, atol=1e-3)
    assert got.dtype == torch.bfloat16 and got.shape == (23, 200)


def test_bf16_linear_keeps_leading_dims(linear_operands):
    x, w, _ = linear_operands
    assert torch.equal(bf16_linear(x.view(1, 23, 96), w)[0], bf16_linear(x, w))


@pytest.fixture
def stressed_linear_operands(linear_operands):
    """Large products that cancel across K tiles (columns 0 and 90, in different BLOCK_K
    tiles for any BLOCK_K of 16+): how K is grouped then moves results by more than a bf16
    ulp, where well-scaled operands would mostly hide an fp32 regrouping in the rounding."""
    x, w, _ = linear_operands
    x, w = x.clone(), w.clone()
    x[:, 0], x[:, 90] = 2.0 ** 16, -(2.0 ** 16)
    w[:, 90] = w[:, 0]
    return x, w


@pytest.mark.parametrize("rows", list(ROW_SUBSETS.values()), ids=list(ROW_SUBSETS))
def test_bf16_linear_rows_equal_rows_of_a_bigger_call(stressed_linear_operands, rows):
    x, w = stressed_linear_operands
    big, small = _rows_of_bigger_call(lambda t, **kw: bf16_linear(t, w, **kw), x, rows)
    assert torch.equal(big, small), f"{int((big != small).sum())} of {big.numel()} differ"


def test_bf16_linear_control_with_block_k_by_rows_is_flagged(stressed_linear_operands):
    x, w = stressed_linear_operands
    big, small = _rows_of_bigger_call(lambda t, **kw: bf16_linear(t, w, **kw), x,
                                      ROW_SUBSETS["suffix"], BLOCK_K=16)
    assert not torch.equal(big, small)


# ------------------------------------------------------------------ rms_norm

@pytest.fixture(params=[torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def norm_operands(request, device):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(23, 80, generator=g) * 3).to(request.param).to(device)
    weight = (1 + torch.randn(80, generator=g) / 4).to(torch.bfloat16).to(device)
    return x, weight


def _qwen3_rmsnorm(x, weight, eps):
    """transformers' Qwen3RMSNorm.forward, in its order."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def test_rms_norm_matches_transformers_order(norm_operands):
    x, weight = norm_operands
    got = rms_norm(x, weight, 1e-6)
    ref = _qwen3_rmsnorm(x, weight, 1e-6)
    # Same formula and roundings; only the fp32 sum of squares is grouped differently
    # (lanes vs torch's reduction), which can move the scale by an fp32 ulp and so an
    # output by one ulp of its dtype.
    ulp = 2 ** -7 if x.dtype == torch.bfloat16 else 2 ** -22
    torch.testing.assert_close(got.float(), ref.float(), rtol=ulp, atol=0)
    assert got.dtype == x.dtype


@pytest.mark.parametrize("rows", list(ROW_SUBSETS.values()), ids=list(ROW_SUBSETS))
def test_rms_norm_rows_equal_rows_of_a_bigger_call(norm_operands, rows):
    x, weight = norm_operands
    big, small = _rows_of_bigger_call(lambda t, **kw: rms_norm(t, weight, 1e-6, **kw), x, rows)
    assert torch.equal(big, small), f"{int((big != small).sum())} of {big.numel()} differ"


def test_rms_norm_control_with_block_h_by_rows_is_flagged(device):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(16, 240, generator=g) * 3).to(device)
    weight = torch.ones(240, device=device)
    big, small = _rows_of_bigger_call(lambda t, **kw: rms_norm(t, weight, 1e-6, **kw), x,
                                      slice(0, 16), BLOCK_H=32)
    assert not torch.equal(big, small)


# ------------------------------------------------------------------ log_softmax

# One slice of the op's SLICE_V positions, and three with a partial last one (the real
# vocabularies span 8 to 64 slices; the merge is the same code).
VOCAB_WIDTHS = {"one-slice": 600, "three-slices": 2 * 4096 + 808}


@pytest.fixture(params=list(VOCAB_WIDTHS.values()), ids=list(VOCAB_WIDTHS))
def logits(device, request):
    g = torch.Generator().manual_seed(5)
    return (torch.randn(23, request.param, generator=g) * 4).to(torch.bfloat16).to(device)


def test_log_softmax_matches_fp64(logits):
    got = log_softmax(logits)
    ref = torch.log_softmax(logits.double(), dim=-1)
    # fp32 arithmetic on values up to ~30 in magnitude: a few fp32 ulps of 30 (2e-6 each).
    torch.testing.assert_close(got.double(), ref, rtol=0, atol=2e-5)
    assert got.dtype == torch.float32


@pytest.mark.parametrize("rows", list(ROW_SUBSETS.values()), ids=list(ROW_SUBSETS))
def test_log_softmax_rows_equal_rows_of_a_bigger_call(logits, rows):
    big, small = _rows_of_bigger_call(log_softmax, logits, rows)
    assert torch.equal(big, small), f"{int((big != small).sum())} of {big.numel()} differ"


def test_log_softmax_slices_depend_on_v_only():
    from det_suite.ops.bi_launch_spec import LOG_SOFTMAX_TILE, log_softmax_launch_spec

    slice_v = LOG_SOFTMAX_TILE["SLICE_V"]
    for v in (1, slice_v, slice_v + 1, 151936):
        grids = {call.grid for m in (1, 7, 4096) for call in log_softmax_launch_spec(m, v)}
        assert {g[1] for g in grids} == {-(-v // slice_v)}, v


def test_a_slice_with_no_finite_logit_adds_nothing(device):
    """Masked logits (-inf over a whole slice, as a padded vocabulary has): the other
    slices' log-probabilities stay finite and match fp64; the masked ones are -inf."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(3, VOCAB_WIDTHS["three-slices"], generator=g) * 4
    x[:, 4096:8192] = float("-inf")
    x = x.to(device)
    got = log_softmax(x)
    ref = torch.log_softmax(x.double(), dim=-1)
    assert torch.isneginf(got[:, 4096:8192]).all()
    finite = torch.isfinite(ref)
    torch.testing.assert_close(got.double()[finite], ref[finite], rtol=0, atol=2e-5)


def test_log_softmax_control_with_a_schedule_by_rows_is_flagged(logits):
    """The small call's rows in one slice of 64 lanes (the op: SLICE_V-position slices of
    its BLOCK_V lanes): the harness must see other bits."""
    rows = ROW_SUBSETS["suffix"]
    big = log_softmax(logits)[rows]
    small = log_softmax(logits[rows], launcher=log_softmax_schedule_by_rows(1 << 14, 64))
    assert not torch.equal(big, small)
    torch.testing.assert_close(small, big, rtol=0, atol=2e-5)  # still a log_softmax


# ------------------------------------------------------------------ bad input

def _bf16(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


@pytest.mark.parametrize("call, error, match", [
    (lambda: bf16_linear(_bf16(2, 8).float(), _bf16(4, 8)), TypeError, "x must have dtype"),
    (lambda: bf16_linear(_bf16(2, 8), _bf16(4, 8).half()), TypeError, "weight must have x's"),
    (lambda: bf16_linear(_bf16(2, 8), _bf16(4, 9)), ValueError, "weight's K=9"),
    (lambda: bf16_linear(_bf16(2, 8), _bf16(4, 8), _bf16(3)), ValueError, "bias must be"),
    (lambda: rms_norm(_bf16(2, 8), _bf16(7), 1e-6), ValueError, "weight must be"),
    (lambda: rms_norm(_bf16(2, 8), _bf16(8), -1.0), ValueError, "eps must be"),
    (lambda: rms_norm(_bf16(8, 2).t(), _bf16(8), 1e-6), ValueError, "contiguous along"),
    (lambda: log_softmax(_bf16(2, 3, 4)), ValueError, "2-D"),
    (lambda: log_softmax(torch.zeros(2, 3, dtype=torch.int32)), TypeError, "x must have"),
], ids=["linear-x-dtype", "linear-weight-dtype", "linear-k", "linear-bias-shape",
        "norm-weight-shape", "norm-eps", "norm-strided", "softmax-3d", "softmax-int"])
def test_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
