"""The fast stock arm's ops (`engine.fast_stock`): its split-KV decode attention computes
attention (against the stock SDPA path, within BF16 rounding) at every split count, its
split count follows the batch as flash-decoding's does, and its stacked rowwise-scaled
linear computes each member's FP8 product."""

import pytest
import torch

import det_suite.ops  # noqa: F401  (the interpreter switch, before any kernel import)
from det_suite.engine import fast_stock as fs
from det_suite.engine.opsets import quantize_static, stock_attention, stock_fp8_linear

R, HQ, HKV, D, PAGE, WIDTH = 3, 4, 2, 16, 4, 40


def _cache(seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    pages = R * WIDTH + 1
    k = torch.randn(pages, PAGE, HKV, D, generator=gen).to(torch.bfloat16)
    v = torch.randn(pages, PAGE, HKV, D, generator=gen).to(torch.bfloat16)
    tables = (torch.randperm(pages - 1, generator=gen)[:R * WIDTH] + 1).reshape(R, WIDTH)
    q = torch.randn(R, HQ, D, generator=gen).to(torch.bfloat16)
    return tuple(t.to(device) for t in (q, k, v, tables.int()))


# Tolerance: both paths round the fp32 result to BF16 once, but the split kernel rounds the
# softmax weights p to BF16 before the PV product (as flash kernels do) and sums in another
# order, so the two may sit a couple of BF16 ulps apart (2^-8 relative each).
def _close(got, want):
    return torch.allclose(got.float(), want.float(), rtol=2 ** -6, atol=2 ** -6)


@pytest.mark.parametrize("splits", [1, 2, 4])
def test_decode_attention_matches_sdpa_at_every_split_count(monkeypatch, splits, device):
    q, k, v, tables = _cache(device=device)
    contexts = torch.tensor([0, 70, 150], dtype=torch.int32, device=device)  # 1, 71, 151 keys
    want = stock_attention(q, k, v, tables, contexts,
                           torch.arange(R + 1, dtype=torch.int32, device=device), D ** -0.5)
    monkeypatch.setattr(fs, "decode_splits", lambda *args: splits)
    got = fs.decode_attention(q, k, v, tables, contexts, D ** -0.5)
    assert _close(got, want), (got.float() - want.float()).abs().max()


def test_decode_attention_can_quantize_the_o_projections_input(device):
    q, k, v, tables = _cache(1, device)
    contexts = torch.tensor([3, 40, 99], dtype=torch.int32, device=device)
    scale = torch.tensor([0.01], device=device)
    plain = fs.decode_attention(q, k, v, tables, contexts, D ** -0.5)
    quantized = fs.decode_attention(q, k, v, tables, contexts, D ** -0.5, out_scale=scale)
    assert quantized.dtype == torch.float8_e4m3fn and quantized.shape == (R, HQ * D)
    # FP8 e4m3 keeps 3 mantissa bits: half a step is 2^-4 relative, and the BF16 output
    # the quantization starts from rounds first: 2^-3 covers both.
    want = plain.reshape(R, -1).float()
    assert torch.allclose(quantized.float() * scale, want, rtol=2 ** -3, atol=2 ** -9)


@pytest.mark.parametrize("requests, kv_heads, max_keys, sms, splits", [
    (1, 8, 8192, 132, 32),     # batch 1, Qwen3-8B: 33 programs per head wanted -> 32
    (4, 8, 8192, 132, 8),
    (64, 8, 8192, 132, 1),     # a large batch fills the GPU without splitting
    (1, 8, 128, 132, 2),       # a short block table: at most one slice per 64 keys
    (1, 8, 1 << 20, 132, 32),
    (1, 1, 1 << 20, 132, 64),  # capped at MAX_SPLITS
])
def test_split_count_follows_the_batch_and_the_cache_capacity(requests, kv_heads, max_keys,
                                                             sms, splits):
    assert fs.decode_splits(requests, kv_heads, max_keys, sms) == splits


def test_split_count_is_a_power_of_two_that_never_grows_with_the_batch():
    counts = [fs.decode_splits(b, 8, 8192, 132) for b in range(1, 80)]
    assert all(c & (c - 1) == 0 for c in counts)
    assert all(a >= b for a, b in zip(counts, counts[1:]))
    assert len(set(counts)) > 3      # it does depend on the batch: not batch-invariant


def _linear(n, k=64, seed=0, weight_scale=0.02, device="cpu"):
    from det_suite.models.synthetic_linear import Fp8Linear

    gen = torch.Generator().manual_seed(seed)
    weight = (torch.randn(n, k, generator=gen) * 8).to(torch.float8_e4m3fn)
    return Fp8Linear(weight.to(device), torch.tensor([weight_scale], device=device),
                     torch.tensor([0.05], device=device), None)


def _group(device, widths=(128, 64)):
    from det_suite.engine.linear_groups import stack_linears

    import dataclasses

    members = [_linear(n, seed=i + 1, weight_scale=0.02 + 0.01 * i, device=device)
               for i, n in enumerate(widths)]
    # One input tensor for all members: the arm stacks only linears that share a scale.
    members = [dataclasses.replace(m, input_scale=members[0].input_scale) for m in members]
    group = stack_linears(members)
    fs._COLUMN_SCALES[id(group)] = (group, torch.repeat_interleave(
        group.weight_scales, torch.tensor(group.widths, device=device)))
    return members, group


def _activations(rows, device, seed=3):
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(seed))
    return x.to(torch.bfloat16).to(device)


def test_above_decode_rows_the_stacked_linear_is_the_vendors_product_per_member(device):
    members, group = _group(device)
    x = _activations(fs.DECODE_MAX_ROWS + 7, device)
    q = quantize_static(x, group.input_scales[:1])
    for got, lin in zip(fs.group_linear(q, group, torch.bfloat16), members):
        assert torch.equal(got, stock_fp8_linear(x, lin))


@pytest.mark.parametrize("rows", [1, 3, fs.DECODE_MAX_ROWS])
def test_at_decode_rows_the_linears_are_det_suites_gemm_bit_for_bit(rows, device):
    """The faster kernel at decode-sized M: det-suite's GEMM on the same FP8 operand (the
    arm's kernel choice follows M; its bits there are det's)."""
    from det_suite.ops.quantized_inputs import QuantizedInput, linear_on_quantized

    members, group = _group(device)
    x = _activations(rows, device)
    q = quantize_static(x, group.input_scales[:1])
    for got, lin in zip(fs.group_linear(q, group, torch.bfloat16), members):
        want = linear_on_quantized(QuantizedInput(q, lin.input_scale, x.dtype), lin.weight,
                                   lin.weight_scale, lin.input_scale)
        assert torch.equal(got, want)
    lin = members[0]
    want = linear_on_quantized(QuantizedInput(q, lin.input_scale, x.dtype), lin.weight,
                               lin.weight_scale, lin.input_scale)
    assert torch.equal(fs.fast_fp8_linear(x, lin), want)


@pytest.mark.parametrize("rows, vendor", [(1, False), (fs.DECODE_MAX_ROWS, False),
                                          (fs.DECODE_MAX_ROWS + 1, True)])
def test_the_kernel_choice_follows_m(monkeypatch, rows, vendor):
    """cuBLASLt above decode-sized M, det-suite's GEMM at or below it, for single and
    stacked linears alike."""
    calls = []
    real = fs.vendor_scaled_mm
    monkeypatch.setattr(fs, "vendor_scaled_mm", lambda *a: calls.append(1) or real(*a))
    members, group = _group("cpu")
    x = _activations(rows, "cpu")
    fs.fast_fp8_linear(x, members[0])
    fs.group_linear(quantize_static(x, group.input_scales[:1]), group, torch.bfloat16)
    assert calls == ([1, 1] if vendor else [])
