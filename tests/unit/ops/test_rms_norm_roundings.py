"""`rms_norm` rounds where transformers' Qwen3RMSNorm rounds: the normalised value to the
activation dtype, then the weight product to it once more.

`test_bi_ops.py` compares with the eager module within one ulp, because the kernel groups
the fp32 sum of squares in its own lanes: that tolerance also lets a missing rounding
through. Here the activations are small integers, so every sum of their squares is exact in
any order, and what is left is bit for bit: the output must equal the eager formula for one
fp32 inverse RMS per row. The inverse is searched among the eager one and its neighbours
(+-2 ulp), since a GPU's fp32 division may be approximate; under the interpreter it is the
eager one itself.
"""

import pytest
import torch

from det_suite.ops.batch_invariant import rms_norm

EPS = 1e-6
ROWS = 6
NEIGHBOURS = 2  # ulps of the inverse RMS searched either side (approximate fp32 division)


def _inverse_rms_candidates(x: torch.Tensor, h: int) -> torch.Tensor:
    """(2 * NEIGHBOURS + 1, rows, 1) fp32 inverses: 1 / sqrt(mean(x^2) + eps) of each row
    (exact mean: integer squares), and its neighbours."""
    squares = x.float() * x.float()
    inverse = 1.0 / torch.sqrt(squares.sum(-1, keepdim=True) / h + EPS)
    candidates = [inverse]
    for direction in (float("inf"), float("-inf")):
        step = inverse
        for _ in range(NEIGHBOURS):
            step = torch.nextafter(step, torch.full_like(step, direction))
            candidates.append(step)
    return torch.stack(candidates)


def _eager(x: torch.Tensor, weight: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """Qwen3RMSNorm's roundings for a given inverse RMS: weight * (h * inv).to(dtype)."""
    return weight * (x.float() * inverse).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("h", [240, 1088], ids=["one-partial-block", "two-blocks"])
def test_each_row_is_the_eager_formula_for_one_inverse_rms(device, dtype, h):
    g = torch.Generator().manual_seed(h)
    x = torch.randint(-8, 9, (ROWS, h), generator=g).to(dtype)
    x[:, 0] = 3  # no row of zeros: its inverse would be 1 / sqrt(eps), far from the others
    weight = (1.0 + 0.25 * torch.randn(h, generator=g)).to(dtype)
    got = rms_norm(x.to(device), weight.to(device), EPS).cpu()
    candidates = _inverse_rms_candidates(x, h)
    matched = 0
    for row in range(ROWS):
        options = [_eager(x[row:row + 1], weight, c[row:row + 1]) for c in candidates]
        assert any(torch.equal(got[row:row + 1], o) for o in options), (
            f"row {row}: no inverse RMS within {NEIGHBOURS} ulp gives the output; closest "
            f"differs in {min(int((got[row:row + 1] != o).sum()) for o in options)} of {h}")
        matched += 1
    print(f"{matched} rows bit-exact with the eager formula")
    assert matched == ROWS


def test_a_missing_rounding_would_be_seen(device):
    """The check can fail: the formula without the rounding to the dtype before the weight
    product (weight * h * inv, rounded once) differs from the eager one on these inputs."""
    g = torch.Generator().manual_seed(240)
    x = torch.randint(-8, 9, (ROWS, 240), generator=g).to(torch.bfloat16)
    x[:, 0] = 3
    weight = (1.0 + 0.25 * torch.randn(240, generator=g)).to(torch.bfloat16)
    inverse = _inverse_rms_candidates(x, 240)[0]
    once = (weight.float() * (x.float() * inverse)).to(torch.bfloat16)
    assert not torch.equal(once, _eager(x, weight, inverse))
