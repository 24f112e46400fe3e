"""Row-by-row comparison of a run with a fixture: exact rows, the first differing token,
drifted questions and prompts, rows missing on either side."""

import copy

import pytest

from det_suite.gsm8k.answers import Extracted
from det_suite.gsm8k.diff import diff_row, diff_rows, first_difference
from det_suite.gsm8k.fixture import output_row
from det_suite.gsm8k.identity import sha256_ids, sha256_text


@pytest.mark.parametrize("a, b, index", [
    ((1, 2, 3), (1, 2, 3), None), ((1, 2, 3), (1, 9, 3), 1), ((1, 2), (1, 2, 3), 2),
    ((1, 2, 3), (1,), 1), ((), (), None), ((), (4,), 0),
], ids=["equal", "middle", "b-longer", "a-longer", "both-empty", "a-empty"])
def test_first_difference(a, b, index):
    assert first_difference(a, b) == index


def _row(n=32, question="Q?", prompt=(1, 2, 3), ids=(10, 11, 12, 13), text="x #### 4"):
    return output_row(row=n, question=question, prompt=prompt, text=text, token_ids=ids,
                      stopped=False, answer=Extracted("4", "marker"), reference="4",
                      keep_text=False)


def _with_ids(row, ids):
    out = copy.deepcopy(row)
    out.update(token_ids=list(ids), tokens_sha256=sha256_ids(ids))
    return out


def test_an_identical_row_is_exact():
    d = diff_row(_row(), _row())
    assert d.exact and d.tokens_equal and d.text_equal and d.first_token is None


def test_a_changed_token_names_its_position_and_both_ids():
    d = diff_row(_row(), _with_ids(_row(), (10, 11, 99, 13)), decode=lambda ids: f"<{ids[0]}>")
    assert d.status == "differs" and not d.tokens_equal
    assert (d.first_token, d.expected_token, d.got_token) == (2, 12, 99)
    assert "output position 2" in d.detail and "fixture 12 '<12>'" in d.detail
    assert "run 99 '<99>'" in d.detail


def test_a_shorter_output_differs_where_it_ends():
    d = diff_row(_row(), _with_ids(_row(), (10, 11)))
    assert (d.first_token, d.expected_token, d.got_token) == (2, 12, None)
    assert "end of output" in d.detail


def test_a_tampered_token_hash_alone_makes_the_row_differ():
    """Ids equal, hash not: the row still fails (the hash is what a fixture promises)."""
    got = dict(_row(), tokens_sha256="0" * 64)
    d = diff_row(_row(), got)
    assert d.status == "differs" and d.tokens_equal is False


def test_a_text_difference_with_equal_ids_is_reported():
    got = dict(_row(), text_sha256=sha256_text("other"))
    d = diff_row(_row(), got)
    assert d.status == "differs" and d.first_token is None and d.text_equal is False
    assert "decodes differently" in d.detail


def test_a_changed_question_is_drift_not_an_output_difference():
    d = diff_row(_row(), _with_ids(_row(question="Q2?"), (1,)))
    assert d.status == "question drifted" and d.first_token is None
    assert "data set row changed" in d.detail


def test_a_changed_prompt_for_the_same_question_is_prompt_drift():
    d = diff_row(_row(), _row(prompt=(1, 2, 4)))
    assert d.status == "prompt drifted"
    assert "tokenizer, chat template or prompt options" in d.detail


def test_rows_missing_from_either_side_are_named():
    expected = [_row(32), _row(33), _row(34)]
    got = [_row(34), _row(32), _row(35)]
    diffs = diff_rows(expected, got)
    assert [(d.row, d.status) for d in diffs] == [(32, "exact"), (33, "missing"),
                                                 (34, "exact"), (35, "extra")]
