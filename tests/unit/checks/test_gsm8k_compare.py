"""`det-suite compare A.json B.json`: two runs of a check held to the same outputs (GSM8K runs
and fixtures, cache-hit results, the generic outputs form), and the exit codes."""

import copy
import json

import pytest

pytest.importorskip("datasets", reason="needs datasets (pip install 'det-suite[gsm8k]')")

from det_suite.checks.fixed_work import compare_files, load_outputs, verdict_lines  # noqa: E402
from det_suite.cli import main  # noqa: E402
from det_suite.gsm8k.fixture import write_fixture  # noqa: E402
from det_suite.gsm8k.identity import sha256_ids  # noqa: E402
from tests.unit.gsm8k.test_gsm8k_support import run  # noqa: E402


@pytest.fixture(scope="module")
def gsm8k_run():
    return run().payload({})


def _write(tmp_path, name, payload):
    path = tmp_path / name
    path.write_text(json.dumps(payload))
    return path


def _changed(payload, row_index, position, token):
    out = copy.deepcopy(payload)
    row = out["rows"][row_index]
    row["token_ids"][position] = token
    row["tokens_sha256"] = sha256_ids(row["token_ids"])
    return out


def test_two_identical_gsm8k_runs_compare_exact(tmp_path, gsm8k_run):
    a = write_fixture(tmp_path / "a.json", gsm8k_run)
    b = write_fixture(tmp_path / "b.json", gsm8k_run)
    result = compare_files(a, b)
    assert result.status == "exact" and result.compared == 5 and result.exit_code == 0
    assert verdict_lines(result)[0] == "5/5 outputs exact (token sequences, token hashes, texts)"


def test_a_run_and_a_fixture_without_texts_compare_by_text_hash(tmp_path, gsm8k_run):
    fixture = {**gsm8k_run, "rows": [{k: v for k, v in r.items() if k != "text"}
                                     for r in gsm8k_run["rows"]]}
    result = compare_files(_write(tmp_path, "a.json", gsm8k_run),
                           _write(tmp_path, "b.json", fixture))
    assert result.status == "exact"


def test_a_differing_token_is_named_with_its_position(tmp_path, gsm8k_run):
    result = compare_files(_write(tmp_path, "a.json", gsm8k_run),
                           _write(tmp_path, "b.json", _changed(gsm8k_run, 1, 2, 7)))
    assert result.status == "differs" and result.exit_code == 1
    [d] = result.diffs
    assert (d.key, d.first_token, d.b_token) == ("row 33", 2, 7)
    assert "row 33: first differing token at 2" in "\n".join(verdict_lines(result))


def _edited(payload, row_index, field, value):
    """A copy with one recorded field of one row overwritten, nothing else kept consistent:
    what a hand-edited fixture looks like."""
    out = copy.deepcopy(payload)
    out["rows"][row_index][field] = value
    return out


@pytest.mark.parametrize("field, value, phrase", [
    ("tokens_sha256", "0" * 64, "B's tokens_sha256 is not the hash of its own token_ids"),
    ("text_sha256", "0" * 64, "B's text_sha256 is not the hash of its own text"),
    ("text", "edited", "texts differ")],
    ids=["token-hash", "text-hash", "text"])
def test_an_edited_fixture_field_is_a_difference_naming_the_row(tmp_path, gsm8k_run, field,
                                                                value, phrase):
    """Every field a fixture records is held to the bits, not only the token ids: an edited
    hash is caught even though the ids still agree (issue 38, item 6)."""
    result = compare_files(_write(tmp_path, "a.json", gsm8k_run),
                           _write(tmp_path, "b.json", _edited(gsm8k_run, 2, field, value)))
    assert (result.status, result.exit_code, [d.key for d in result.diffs]) == \
        ("differs", 1, ["row 34"])
    assert "row 34: " in "\n".join(verdict_lines(result))
    assert phrase in "\n".join(verdict_lines(result))


def test_the_command_exits_1_on_an_edited_token_hash(tmp_path, capsys, gsm8k_run):
    b = _edited(gsm8k_run, 0, "tokens_sha256", "f" * 64)
    assert main(["compare", str(_write(tmp_path, "a.json", gsm8k_run)),
                 str(_write(tmp_path, "b.json", b))]) == 1
    assert "row 32: tokens_sha256 differ; B's tokens_sha256" in capsys.readouterr().out


def test_different_rows_are_not_the_same_work(tmp_path, gsm8k_run):
    fewer = {**gsm8k_run, "rows": gsm8k_run["rows"][:3]}
    a, b = _write(tmp_path, "a.json", gsm8k_run), _write(tmp_path, "b.json", fewer)
    result = compare_files(a, b)
    assert result.status == "not comparable" and result.exit_code == 3
    assert "2 outputs only in A" in result.reasons[0]


def test_a_subset_compares_what_both_hold_when_asked(tmp_path, gsm8k_run):
    fewer = {**gsm8k_run, "rows": gsm8k_run["rows"][:3]}
    result = compare_files(_write(tmp_path, "a.json", gsm8k_run),
                           _write(tmp_path, "b.json", fewer), subset=True)
    assert result.status == "exact" and result.compared == 3


def test_different_prompts_are_not_the_same_work(tmp_path, gsm8k_run):
    other = copy.deepcopy(gsm8k_run)
    other["rows"][0]["prompt_sha256"] = "0" * 64
    result = compare_files(_write(tmp_path, "a.json", gsm8k_run),
                           _write(tmp_path, "b.json", other))
    assert result.status == "not comparable" and "different inputs" in result.reasons[0]


def _cache_hit(delta=0.0):
    def row(phase, engine="eager"):
        return {"mode": "det", "engine": engine, "prefix": 12, "batch": 2, "rep": 0,
                "phase": phase, "cold_ids": [4, 5], "other_ids": [4, 5],
                "cold_logprobs": [-1.5, -0.25, -2.0],
                "other_logprobs": [-1.5, -0.25 + delta, -2.0]}
    return {"settings": {"model": "synthetic:tiny?seed=0", "backend": "embedded"},
            "comparisons": [row("hit"), row("warm"), row("cold-vs-eager", engine="graph")]}


def test_cache_hit_results_compare_ids_and_logprobs_bit_for_bit(tmp_path):
    a = load_outputs(_write(tmp_path, "a.json", _cache_hit()))
    assert sorted(a.outputs) == ["det eager prefix 12 batch 2 rep 0 cold",
                                 "det eager prefix 12 batch 2 rep 0 hit",
                                 "det eager prefix 12 batch 2 rep 0 warm",
                                 "det graph prefix 12 batch 2 rep 0 cold"]
    result = compare_files(_write(tmp_path, "a.json", _cache_hit()),
                           _write(tmp_path, "b.json", _cache_hit(2.0 ** -20)))
    assert result.status == "differs" and result.values_compared
    assert {d.key for d in result.diffs} == {"det eager prefix 12 batch 2 rep 0 hit",
                                             "det eager prefix 12 batch 2 rep 0 warm",
                                             "det graph prefix 12 batch 2 rep 0 cold"}
    assert all(d.first_token is None and d.max_abs_delta == 2.0 ** -20 for d in result.diffs)


def test_the_generic_outputs_form_compares_texts(tmp_path):
    def outputs(text):
        return {"kind": "outputs", "check": "e2e", "outputs": [
            {"key": "boot0/cell0/sample1", "token_ids": [1, 2], "text": text}]}
    same = compare_files(_write(tmp_path, "a.json", outputs("hi")),
                         _write(tmp_path, "b.json", outputs("hi")))
    other = compare_files(_write(tmp_path, "a.json", outputs("hi")),
                          _write(tmp_path, "b.json", outputs("ho")))
    assert same.status == "exact"
    assert other.status == "differs" and other.diffs[0].text_equal is False


def test_the_generic_outputs_form_checks_a_recorded_token_hash(tmp_path):
    def outputs(digest):
        return {"kind": "outputs", "outputs": [
            {"key": "k", "token_ids": [1, 2], "tokens_sha256": digest}]}
    good = compare_files(_write(tmp_path, "a.json", outputs(sha256_ids([1, 2]))),
                         _write(tmp_path, "b.json", outputs(sha256_ids([1, 2]))))
    bad = compare_files(_write(tmp_path, "a.json", outputs(sha256_ids([1, 2]))),
                        _write(tmp_path, "b.json", outputs(sha256_ids([1, 3]))))
    assert good.status == "exact" and bad.status == "differs"


def test_results_of_different_checks_are_not_comparable(tmp_path, gsm8k_run):
    result = compare_files(_write(tmp_path, "a.json", gsm8k_run),
                           _write(tmp_path, "b.json", _cache_hit()))
    assert result.status == "not comparable" and "gsm8k vs cache-hit" in result.reasons[0]


@pytest.mark.parametrize("content, match", [
    ({"rows": []}, "not a result with per-row outputs"),
    ({"kind": "outputs", "outputs": [{"text": "x"}]}, "expected 'key' and 'token_ids'"),
    ({"kind": "gsm8k", "rows": [{"row": 1}]}, "malformed gsm8k"),
], ids=["unknown", "generic-without-ids", "gsm8k-without-fields"])
def test_a_file_without_outputs_is_refused_naming_it(tmp_path, content, match):
    with pytest.raises(ValueError, match=match):
        load_outputs(_write(tmp_path, "a.json", content))


@pytest.mark.parametrize("change, code", [(None, 0), ((0, 0, 9), 1)],
                         ids=["exact", "differs"])
def test_the_command_exits_by_verdict(tmp_path, capsys, gsm8k_run, change, code):
    b = gsm8k_run if change is None else _changed(gsm8k_run, *change)
    args = ["compare", str(_write(tmp_path, "a.json", gsm8k_run)),
            str(_write(tmp_path, "b.json", b)), "--json", str(tmp_path / "c.json")]
    assert main(args) == code
    assert "compare:" in capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text())["exit_code"] == code


def test_the_command_exits_2_on_an_unreadable_file(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    assert "no such file" in capsys.readouterr().err
