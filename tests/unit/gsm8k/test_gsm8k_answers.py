"""GSM8K answer extraction: the number after the last '####', else the last number; the
reference from a solution's '####' line; numeric equality of the two."""

import pytest

from det_suite.gsm8k.answers import (Extracted, extract_answer, is_correct, normalize_number,
                                     reference_answer)


@pytest.mark.parametrize("text, value, source", [
    ("She has 3 + 4 = 7 apples.\n#### 7", "7", "marker"),
    ("#### 1,200", "1200", "marker"),
    ("#### $18.00 dollars", "18", "marker"),
    ("#### -3", "-3", "marker"),
    ("#### 2.50", "2.5", "marker"),
    ("first #### 5 then #### 6", "6", "marker"),
    ("#### 4 and 9 later", "4", "marker"),
    ("The answer is 12, not 13.", "13", "last-number"),
    ("#### none\nso 8", "8", "last-number"),
    ("x=-3", "-3", "last-number"),
    ("5-3", "3", "last-number"),
    ("It costs $1,234.5.", "1234.5", "last-number"),
    ("no digits here", None, "none"),
    ("", None, "none"),
], ids=["marker", "thousands", "currency-and-zeros", "negative", "decimal", "last-marker-wins",
        "first-number-after-marker", "last-number", "marker-without-number", "signed-after-equals",
        "minus-between-numbers", "currency-sentence-end", "no-number", "empty"])
def test_extract_answer(text, value, source):
    assert extract_answer(text) == Extracted(value, source)


@pytest.mark.parametrize("solution, expected", [
    ("48/2 = <<48/2=24>>24\n#### 72", "72"),
    ("#### 1,000", "1000"),
    ("#### 0.5", "0.5"),
], ids=["gsm8k-layout", "thousands", "decimal"])
def test_reference_answer(solution, expected):
    assert reference_answer(solution) == expected


@pytest.mark.parametrize("solution", ["the answer is 72", "#### ", 72],
                         ids=["no-marker", "marker-without-number", "not-a-string"])
def test_a_solution_without_a_final_number_is_refused_by_name(solution):
    with pytest.raises(ValueError, match="row 7: answer"):
        reference_answer(solution, where="row 7: answer")


@pytest.mark.parametrize("extracted, reference, correct", [
    (Extracted("72", "marker"), "72", True),
    (Extracted("72", "last-number"), "72", True),
    (Extracted("2.5", "marker"), "2.50", True),
    (Extracted("71", "marker"), "72", False),
    (Extracted(None, "none"), "72", False),
], ids=["marker", "last-number-counts", "decimal-equal", "wrong", "missing"])
def test_is_correct(extracted, reference, correct):
    assert is_correct(extracted, reference) is correct


@pytest.mark.parametrize("text, expected", [("1,200", "1200"), ("$5", "5"), ("7.000", "7"),
                                             ("abc", None), ("1e400x", None)],
                         ids=["comma", "dollar", "trailing-zeros", "word", "not-a-number"])
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


def test_extract_answer_refuses_a_non_string():
    with pytest.raises(TypeError, match="text"):
        extract_answer(None)
