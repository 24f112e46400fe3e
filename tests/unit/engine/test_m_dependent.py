"""The m-dependent positive control's FP8 linear (`engine.m_dependent`): its K-chunk count
follows M, so a row's result changes with the number of rows in the call, while each call
stays a correct FP8 product (close to the stock linear)."""

from types import SimpleNamespace

import pytest
import torch

from det_suite.engine.m_dependent import (K_ALIGN, chunk_bounds, k_chunks,
                                          m_dependent_fp8_linear, m_dependent_opset)
from det_suite.engine.opsets import opset_for, stock_fp8_linear


@pytest.mark.parametrize("small, large", [(5, 17), (12, 24), (32, 160), (1, 2), (2, 4)])
def test_calls_whose_m_differ_by_2x_to_4x_use_different_chunk_counts(small, large):
    assert k_chunks(small, 4096) != k_chunks(large, 4096)


def test_the_chunk_count_depends_on_m_alone_for_a_given_k():
    assert {k_chunks(m, 4096) for m in range(1, 300)} == {1, 2, 3}
    assert k_chunks(1000, 4096) == k_chunks(1001, 4096)


@pytest.mark.parametrize("k", [16, 32, 64, 80, 128, 4096, 12288])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 100])
def test_chunks_cover_k_once_in_order_with_aligned_starts(k, m):
    bounds = chunk_bounds(k, k_chunks(m, k))
    assert len(bounds) == k_chunks(m, k)
    assert bounds[0][0] == 0 and bounds[-1][1] == k
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert all(start % K_ALIGN == 0 and end > start for start, end in bounds)


def _linear(n=48, k=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    weight = (torch.randn(n, k, generator=gen) * 8).to(torch.float8_e4m3fn)
    return SimpleNamespace(weight=weight, weight_scale=torch.tensor([0.02]),
                           input_scale=torch.tensor([0.05]), bias=None)


def test_a_rows_result_changes_with_the_number_of_rows_in_the_call():
    lin = _linear()
    x = torch.randn(24, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    alone = m_dependent_fp8_linear(x[:5], lin)            # 5 rows: 1 + 3 % 3 = 1 chunk
    inside = m_dependent_fp8_linear(x, lin)[:5]           # 24 rows: 1 + 5 % 3 = 3 chunks
    assert k_chunks(5, 64) != k_chunks(24, 64)
    assert not torch.equal(alone, inside)


def test_each_call_is_still_the_fp8_product():
    # Tolerance: each chunk's partial is rounded to BF16 before the sum, so the result may
    # sit a few BF16 ulps (2^-8 relative each) from the stock linear's single rounding.
    lin = _linear()
    x = torch.randn(24, 64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    got, want = m_dependent_fp8_linear(x, lin).float(), stock_fp8_linear(x, lin).float()
    assert torch.allclose(got, want, rtol=2 ** -6, atol=2 ** -6 * want.abs().max().item())


def test_the_arm_is_det_except_for_the_linears():
    det, control = opset_for("det"), m_dependent_opset()
    assert opset_for("m-dependent").name == control.name == "m-dependent"
    assert control.fp8_linear is m_dependent_fp8_linear
    assert control.group_linear is None
    assert control.rms_norm is det.rms_norm and control.attention is det.attention
    assert control.log_softmax is det.log_softmax and control.bf16_linear is det.bf16_linear
