"""`bf16_linear` (the lm_head) at the batch sizes an engine calls it with: the rows of a call
of 1 .. 257 rows equal the same rows inside one call of 300, on both sides of every power of
two a tile heuristic could switch at (`test_bi_ops.py` checks calls of up to 23 rows, below
any such switch). A tile whose BLOCK_K follows the row count is flagged (the check can fail).

The operands cancel a large product across K tiles, so a regrouped K sum moves outputs by
more than a bf16 ulp instead of hiding in the rounding."""

import pytest
import torch

from det_suite.ops.batch_invariant import bf16_linear
from tests.unit.ops.test_bi_ops import tile_by_rows

BIG_M, K, N = 300, 96, 40
ROW_COUNTS = [1, 2, 16, 17, 63, 64, 65, 128, 129, 256, 257]
CONTROL_ROWS = 65


@pytest.fixture(scope="module")
def operands(kernel_device):
    g = torch.Generator().manual_seed(21)
    x = torch.randn(BIG_M, K, generator=g)
    w = torch.randn(N, K, generator=g) / K ** 0.5
    x[:, 0], x[:, 90] = 2.0 ** 16, -(2.0 ** 16)
    w[:, 90] = w[:, 0]
    return x.to(torch.bfloat16).to(kernel_device), w.to(torch.bfloat16).to(kernel_device)


@pytest.fixture(scope="module")
def big_call(operands):
    x, w = operands
    return bf16_linear(x, w)


@pytest.mark.parametrize("m", ROW_COUNTS, ids=[f"m{m}" for m in ROW_COUNTS])
def test_the_last_m_rows_alone_equal_them_inside_the_big_call(operands, big_call, m):
    # The last rows: a cached prefix's new tokens, computed alone after a cache hit.
    x, w = operands
    small = bf16_linear(x[BIG_M - m:], w)
    differ = int((small != big_call[BIG_M - m:]).sum())
    print(f"m={m}: {small.numel()} outputs compared, {differ} differ")
    assert differ == 0


def test_a_block_k_that_follows_the_row_count_is_flagged(operands, big_call):
    x, w = operands
    small = bf16_linear(x[BIG_M - CONTROL_ROWS:], w, launcher=tile_by_rows(BLOCK_K=32))
    assert not torch.equal(small, big_call[BIG_M - CONTROL_ROWS:])
