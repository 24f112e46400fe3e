"""The GSM8K run, record and check on a stand-in backend (outputs a pure function of the
prompt), no model: batching, stop handling, answers, fixtures written and refused, a check
that passes, fails naming the row and the first differing token, or is not comparable."""

import json

import pytest

pytest.importorskip("datasets", reason="needs datasets (pip install 'det-suite[gsm8k]')")

from det_suite.checks.gsm8k import (CheckSettings, check_gsm8k, record_gsm8k,  # noqa: E402
                                    verdict_lines, write_check)
from det_suite.gsm8k.fixture import FixtureError, read_fixture, write_fixture  # noqa: E402
from det_suite.gsm8k.identity import sha256_ids  # noqa: E402
from det_suite.gsm8k.run import Gsm8kSettings, _engine_options  # noqa: E402
from tests.unit.gsm8k.test_gsm8k_support import (EOS, H200_PLATFORM, EchoBackend, run,  # noqa: E402
                                run_options, settings, tokenizer)

ENV = {"host": "test"}


def test_rows_are_sent_in_batches_of_batch_size():
    backend = EchoBackend()
    result = run(backend, batch_size=2)
    assert backend.batches == [2, 2, 1]
    assert [r["row"] for r in result.rows] == [32, 33, 34, 35, 36]


def test_batch_size_does_not_move_an_output_to_another_row():
    assert run(batch_size=1).rows == run(batch_size=3).rows


def test_the_output_is_cut_before_the_first_stop_id():
    result = run()
    row = result.rows[0]
    assert row["stopped"] is True and EOS not in row["token_ids"]
    assert row["text"] == f"{row['prompt_tokens']} tokens.\n#### {row['prompt_tokens'] % 7}"


def test_answers_are_extracted_and_scored_against_the_reference():
    for row in run().rows:
        assert row["answer_source"] == "marker"
        assert row["answer"] == str(row["prompt_tokens"] % 7)
        assert row["correct"] is (row["answer"] == row["reference"])


def test_an_output_cut_by_max_new_tokens_is_not_stopped():
    row = run(max_new_tokens=3).rows[0]
    assert row["stopped"] is False and len(row["token_ids"]) == 3


def test_few_shot_exemplars_lengthen_every_prompt():
    plain, shot = run().rows, run(shots=2).rows
    assert all(s["prompt_tokens"] > p["prompt_tokens"] for p, s in zip(plain, shot))
    assert [s["question_sha256"] for s in shot] == [p["question_sha256"] for p in plain]


def test_the_run_records_the_settings_that_repeat_it():
    s = run().settings
    assert s["rows"] == [32, 33, 34, 35, 36] and s["engine"] == "eager"
    assert s["data"] == {"kind": "synthetic", "spec": "synthetic?size=48", "split": "test",
                         "seed": 0, "size": 48}
    assert s["prompt"]["style"] == "chat" and s["stop_ids"] == [EOS]


@pytest.mark.parametrize("overrides, match", [
    ({"max_new_tokens": 0}, "max_new_tokens"), ({"batch_size": 0}, "batch_size"),
    ({"rows": ()}, "rows"), ({"rows": (3, 3)}, "rows"), ({"rows": (-1,)}, "rows"),
    ({"shots": 4, "rows": (2, 9)}, "few-shot"), ({"mode": "fast"}, "mode"),
    ({"shots": -1}, "shots"),
], ids=["zero-tokens", "zero-batch", "no-rows", "repeated-row", "negative-row",
        "row-is-an-exemplar", "unknown-mode", "negative-shots"])
def test_bad_settings_are_refused_by_name(overrides, match):
    with pytest.raises(ValueError, match=match):
        Gsm8kSettings(**overrides)


@pytest.mark.parametrize("batch, sizes", [(1, (1,)), (6, (1, 2, 4, 6)), (8, (1, 2, 4, 8))],
                         ids=["one", "between-powers", "power"])
def test_graph_sizes_cover_every_batch_up_to_batch_size(batch, sizes):
    options = _engine_options(settings(batch_size=batch), [(1,) * 30] * 20, graph=True)
    assert options["graph_batch_sizes"] == sizes
    assert options["max_seq_len"] >= 30 + 24 and options["max_seq_len"] % 16 == 0
    assert options["num_pages"] > batch * options["max_seq_len"] // 16


# -- record --------------------------------------------------------------------------------

@pytest.fixture
def recorded(tmp_path):
    return record_gsm8k(settings(keep_texts=False), tmp_path / "fixtures", environment=ENV,
                        **run_options())


def test_record_writes_a_valid_fixture_named_by_its_key(recorded, tmp_path):
    assert recorded.path.parent.name == "synthetic-tiny-seed0"
    assert recorded.path.name.startswith("embedded-det__cpu")
    payload = read_fixture(recorded.path)
    assert [r["row"] for r in payload["rows"]] == [32, 33, 34, 35, 36]
    assert all("text" not in r for r in payload["rows"])


def test_record_refuses_to_replace_a_fixture_before_running(recorded, tmp_path):
    backend = EchoBackend()
    with pytest.raises(FileExistsError, match="exists"):
        record_gsm8k(settings(), tmp_path / "fixtures", environment=ENV,
                     **run_options(backend))
    assert backend.batches == []


def test_record_with_force_replaces_it(recorded, tmp_path):
    again = record_gsm8k(settings(), tmp_path / "fixtures", force=True, environment=ENV,
                         **run_options())
    assert again.path == recorded.path


# -- check ---------------------------------------------------------------------------------

def _check(path, backend=None, **overrides):
    s = CheckSettings(fixture=str(path), device="cpu", progress=False, **overrides)
    return check_gsm8k(s, **run_options(backend))


def test_the_same_work_checks_exact(recorded):
    result = _check(recorded.path)
    assert result.status == "exact" and result.exit_code == 0
    assert len(result.diffs) == 5 and all(d.exact for d in result.diffs)
    assert verdict_lines(result)[0].startswith("all 5 rows exact")


def test_another_batch_size_checks_exact_when_outputs_do_not_depend_on_it(recorded):
    assert _check(recorded.path, batch_size=3).status == "exact"


def _edit_row(prompt_sha256: str, position: int, token: int):
    def edit(prompt, ids):
        if sha256_ids(prompt) != prompt_sha256:
            return ids
        return ids[:position] + (token,) + ids[position + 1:]
    return edit


def test_a_changed_output_fails_naming_the_row_and_first_token(recorded):
    target = read_fixture(recorded.path)["rows"][2]
    result = _check(recorded.path, EchoBackend(_edit_row(target["prompt_sha256"], 3, 90)))
    assert result.status == "differs" and result.exit_code == 1
    [bad] = result.differing
    assert (bad.row, bad.first_token, bad.got_token) == (34, 3, 90)
    assert bad.expected_token == target["token_ids"][3]
    text = "\n".join(verdict_lines(result))
    assert "1 of 5 rows NOT exact" in text and "row 34: differs" in text
    assert "output position 3" in text and f"run 90 {tokenizer().decode([90])!r}" in text


def test_a_fixture_with_a_tampered_token_fails_naming_the_row_and_token(recorded):
    payload = read_fixture(recorded.path)
    row = payload["rows"][1]
    row["token_ids"][0] += 1
    row["tokens_sha256"] = sha256_ids(row["token_ids"])
    write_fixture(recorded.path, payload)
    result = _check(recorded.path)
    [bad] = result.differing
    assert (bad.row, bad.first_token) == (33, 0)
    assert bad.expected_token == bad.got_token + 1


def test_a_fixture_with_a_tampered_hash_is_refused_naming_the_row(recorded):
    payload = json.loads(recorded.path.read_text())
    payload["rows"][4]["tokens_sha256"] = "f" * 64
    recorded.path.write_text(json.dumps(payload))
    with pytest.raises(FixtureError, match="row 36: tokens_sha256"):
        _check(recorded.path)


def test_a_fixture_from_another_family_is_not_comparable_and_nothing_runs(recorded):
    payload = read_fixture(recorded.path)
    payload["key"]["platform"] = dict(H200_PLATFORM)
    write_fixture(recorded.path, payload)
    backend = EchoBackend()
    result = _check(recorded.path, backend)
    assert result.status == "not comparable" and result.exit_code == 3
    assert backend.batches == []
    assert any("gpu_family: recorded sm90, this run None" in r for r in result.reasons)
    assert "NOT COMPARABLE" in verdict_lines(result)[0]


def test_a_subset_of_rows_checks_only_those(recorded):
    result = _check(recorded.path, rows=(33, 35))
    assert [d.row for d in result.diffs] == [33, 35] and result.status == "exact"


def test_rows_outside_the_fixture_are_refused(recorded):
    with pytest.raises(ValueError, match="not in the fixture"):
        _check(recorded.path, rows=(33, 40))


def test_a_search_finds_the_fixture_matching_this_machine(recorded, tmp_path):
    other = read_fixture(recorded.path)
    other["key"]["stack"]["triton"] = "0.0.0"
    write_fixture(recorded.path.with_name("other-stack.json"), other)
    s = CheckSettings(fixtures=str(tmp_path / "fixtures"), model="synthetic:tiny?seed=0",
                      device="cpu", progress=False)
    result = check_gsm8k(s, **run_options())
    assert result.status == "exact" and result.fixture == str(recorded.path)


def test_a_search_without_a_matching_fixture_says_why_each_is_not(recorded, tmp_path):
    s = CheckSettings(fixtures=str(tmp_path / "fixtures"), model="synthetic:tiny?seed=0",
                      mode="stock", device="cpu", progress=False)
    result = check_gsm8k(s, **run_options())
    assert result.status == "not comparable" and result.fixture is None
    assert any("mode: recorded det, this run stock" in r for r in result.reasons)


def test_an_empty_folder_is_not_comparable(tmp_path):
    s = CheckSettings(fixtures=str(tmp_path), model="synthetic:tiny?seed=0", device="cpu",
                      progress=False)
    result = check_gsm8k(s, **run_options())
    assert result.status == "not comparable" and "no fixture" in result.reasons[0]


def test_the_check_writes_its_verdict_and_the_run(recorded, tmp_path):
    out = write_check(_check(recorded.path), tmp_path / "out", ENV)
    check = json.loads((out / "check.json").read_text())
    assert check["status"] == "exact" and check["exit_code"] == 0 and len(check["rows"]) == 5
    assert "all 5 rows exact" in (out / "check.md").read_text()
    run_payload = read_fixture(out / "run.json")
    assert all("text" in r for r in run_payload["rows"])
