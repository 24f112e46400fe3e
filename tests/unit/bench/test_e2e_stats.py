"""The e2e statistics: medians and ranges, and the two-level bootstrap interval of a ratio of
pooled medians."""

import pytest

from det_suite.bench.e2e.stats import median, pooled, ratio_interval, value_range


@pytest.mark.parametrize("values, expected", [
    ([3.0], 3.0), ([1.0, 9.0, 2.0], 2.0), ([1.0, 2.0, 3.0, 10.0], 2.5),
], ids=["one", "odd", "even"])
def test_median(values, expected):
    assert median(values) == expected


def test_range_and_pooling():
    assert value_range([4.0, 1.0, 3.0]) == (1.0, 4.0)
    assert pooled([[1.0, 2.0], [3.0]]) == [1.0, 2.0, 3.0]


def test_constant_arms_give_the_exact_ratio_as_a_point_interval():
    a = [[10.0] * 5, [10.0] * 5]
    b = [[12.5] * 5, [12.5] * 5]
    assert ratio_interval(a, b) == (1.25, 1.25)


def test_same_inputs_and_seed_give_the_same_interval():
    a = [[10.0, 11.0, 9.5, 10.2, 10.4], [10.1, 10.9, 9.8, 10.0, 10.3]]
    b = [[10.5, 11.2, 10.1, 10.6, 10.8], [10.4, 11.0, 10.2, 10.7, 10.9]]
    assert ratio_interval(a, b, seed=3) == ratio_interval(a, b, seed=3)
    low, high = ratio_interval(a, b)
    point = median(pooled(b)) / median(pooled(a))
    assert low <= point <= high and low < high


def test_a_boot_effect_widens_the_interval_beyond_the_sample_noise():
    """Two boots of B far apart: resampling boots must show that, samples alone would not."""
    a = [[10.0, 10.1, 9.9, 10.0, 10.1], [10.0, 9.9, 10.1, 10.0, 10.0]]
    b_steady = [[11.0, 11.1, 10.9, 11.0, 11.1], [11.0, 10.9, 11.1, 11.0, 11.0]]
    b_split = [[10.0, 10.1, 9.9, 10.0, 10.1], [12.0, 11.9, 12.1, 12.0, 12.0]]
    steady_low, steady_high = ratio_interval(a, b_steady)
    split_low, split_high = ratio_interval(a, b_split)
    assert split_high - split_low > 5 * (steady_high - steady_low)
    assert split_low <= 1.01 and split_high >= 1.19


@pytest.mark.parametrize("kwargs, message", [
    (dict(a_boots=[], b_boots=[[1.0]]), "a_boots: expected at least one boot"),
    (dict(a_boots=[[1.0]], b_boots=[[]]), "b_boots: expected at least one boot"),
    (dict(a_boots=[[1.0]], b_boots=[[1.0]], level=1.5), "level: expected a value in"),
    (dict(a_boots=[[1.0]], b_boots=[[1.0]], resamples=10), "resamples: expected at least"),
], ids=["no-a-boots", "empty-b-boot", "bad-level", "few-resamples"])
def test_ratio_interval_rejects(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ratio_interval(**kwargs)


def test_unequal_boots_are_resampled_too():
    a = [[10.0, 10.0, 10.0], [10.0, 10.0]]
    b = [[20.0, 20.0, 20.0], [20.0]]
    assert ratio_interval(a, b) == (2.0, 2.0)
