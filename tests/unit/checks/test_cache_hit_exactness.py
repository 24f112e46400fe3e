"""The cache-hit check's comparison (`checks.cache_hit.compare_completions`): "exact" means
the selected-token logprobs are equal as fp32 values (`torch.equal`) and the ids are equal;
one fp32 ulp, a sign of zero aside, or one different id is not exact. The values compared
are counted, and the largest difference reported."""

import math

import pytest
import torch

from det_suite.backends.interface import Completion
from det_suite.checks.cache_hit import compare_completions

LOGPROBS = (-0.5, -1.25, -3.0078125, -0.0009765625)
IDS = (11, 12, 13)


def _one_ulp_down(value: float) -> float:
    # fp32 ulp: logprobs travel as Python floats but are compared as fp32.
    return value - math.ulp(value) * 2 ** 29


def _completion(logprobs=LOGPROBS, ids=IDS, cached=0):
    return Completion(output_ids=ids, logprobs=logprobs, cached_tokens=cached)


def test_equal_values_and_ids_are_exact():
    values, delta, ids_equal, exact = compare_completions(_completion(), _completion(cached=8))
    assert (values, delta, ids_equal, exact) == (len(LOGPROBS), 0.0, True, True)


@pytest.mark.parametrize("other, ids_equal", [
    (_completion(logprobs=(LOGPROBS[0], _one_ulp_down(LOGPROBS[1]), *LOGPROBS[2:])), True),
    (_completion(logprobs=(*LOGPROBS[:3], _one_ulp_down(LOGPROBS[3]))), True),
    (_completion(ids=(11, 12, 14)), False),
    (_completion(logprobs=LOGPROBS[:3]), True),
], ids=["one-fp32-ulp", "one-ulp-of-a-small-logprob", "one-id", "one-value-fewer"])
def test_anything_short_of_equal_is_not_exact(other, ids_equal):
    values, delta, got_ids_equal, exact = compare_completions(_completion(), other)
    assert not exact
    assert got_ids_equal == ids_equal
    assert values == len(LOGPROBS)
    assert delta > 0.0 or not ids_equal


def test_one_ulp_is_one_fp32_ulp():
    """The ulp the tests above use is a real fp32 step: the value differs from the original
    as an fp32 and is its fp32 neighbour."""
    a = torch.tensor(LOGPROBS[1], dtype=torch.float32)
    b = torch.tensor(_one_ulp_down(LOGPROBS[1]), dtype=torch.float32)
    assert torch.nextafter(a, torch.tensor(-math.inf)) == b
