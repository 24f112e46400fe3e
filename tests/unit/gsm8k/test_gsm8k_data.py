"""GSM8K data: the generated set is deterministic and GSM8K-schema with right answers; every
source (generated, local file, local folder) goes through `datasets`; rows are selected by
range; bad sources, rows and schemas are refused by name."""

import json
import re

import pytest

pytest.importorskip("datasets", reason="needs datasets (pip install 'det-suite[gsm8k]')")

from det_suite.gsm8k import data  # noqa: E402
from det_suite.gsm8k.answers import reference_answer  # noqa: E402
from det_suite.gsm8k.synthetic import (DEFAULT_SIZE, synthetic_row,  # noqa: E402
                                       synthetic_rows, write_synthetic_jsonl)


def test_the_generated_set_is_the_same_for_the_same_seed():
    assert synthetic_rows(3, 40) == synthetic_rows(3, 40)


def test_another_seed_gives_another_set():
    assert synthetic_rows(0, 40) != synthetic_rows(1, 40)


def test_a_row_does_not_depend_on_the_set_size():
    assert synthetic_rows(0, 50)[37] == synthetic_row(0, 37)


def test_generated_rows_are_pinned_across_machines():
    """The generator is sha256-driven: this row is what every machine must produce."""
    assert synthetic_row(0, 32) == {
        "question": "Kemi sells 28 apples a day for 2 days at $8 each. How much is earned?",
        "answer": "Kemi sells 28*2 = <<28*2=56>>56.\nThat earns 56*8 = <<56*8=448>>448.\n#### 448"}


def _evaluate(expr: str) -> int:
    assert re.fullmatch(r"[\d+\-*/]+", expr), expr
    value = eval(expr)  # noqa: S307 - digits and + - * / only, asserted above
    assert value == int(value), expr
    return int(value)


def test_every_calculator_step_and_final_answer_is_right():
    for row in synthetic_rows(0, 300):
        steps = re.findall(r"<<([^=<>]+)=(-?\d+)>>", row["answer"])
        assert steps, row
        for expr, value in steps:
            assert _evaluate(expr) == int(value), row
        assert reference_answer(row["answer"]) == steps[-1][1]
        assert int(steps[-1][1]) >= 0


@pytest.mark.parametrize("spec, kind", [
    ("synthetic", "synthetic"), ("synthetic?seed=2&size=10", "synthetic"),
    ("openai/gsm8k", "hub"),
], ids=["synthetic", "synthetic-with-query", "hub-id"])
def test_parse_source_kinds(spec, kind):
    assert data.parse_source(spec).kind == kind


@pytest.mark.parametrize("spec, match", [
    ("synthetic?seed=x", "non-negative"), ("synthetic?rows=3", "non-negative"),
    ("synthetic?size=0", "size"), ("no/such/file.jsonl", "no such file"), ("", "data"),
], ids=["bad-seed", "unknown-key", "empty-size", "missing-path", "empty"])
def test_bad_sources_are_refused_by_name(spec, match):
    with pytest.raises(ValueError, match=match):
        data.parse_source(spec)


def test_a_local_file_of_another_format_is_refused(tmp_path):
    path = tmp_path / "rows.txt"
    path.write_text("x")
    with pytest.raises(ValueError, match=".jsonl"):
        data.parse_source(str(path))


def test_the_generated_set_loads_through_datasets_with_gsm8k_columns():
    dataset = data.load_split(data.parse_source("synthetic?seed=0&size=64"), progress=False)
    assert type(dataset).__name__ == "Dataset"
    assert len(dataset) == 64 and set(dataset.column_names) == {"question", "answer"}
    assert dataset[32] == synthetic_row(0, 32)


def test_a_local_jsonl_file_loads_like_the_generated_set(tmp_path):
    path = write_synthetic_jsonl(tmp_path / "test.jsonl", seed=5, size=12)
    dataset = data.load_split(data.parse_source(str(path)), progress=False)
    assert [dataset[i] for i in range(12)] == synthetic_rows(5, 12)


def test_a_local_copy_of_the_hub_layout_loads_its_config_and_split(tmp_path):
    from datasets import Dataset
    (tmp_path / "main").mkdir()
    (tmp_path / "socratic").mkdir()
    Dataset.from_list(synthetic_rows(1, 6)).to_parquet(
        str(tmp_path / "main" / "test-00000-of-00001.parquet"))
    Dataset.from_list(synthetic_rows(2, 3)).to_parquet(
        str(tmp_path / "main" / "train-00000-of-00001.parquet"))
    Dataset.from_list(synthetic_rows(3, 4)).to_parquet(
        str(tmp_path / "socratic" / "test-00000-of-00001.parquet"))
    dataset = data.load_split(data.parse_source(str(tmp_path)), progress=False)
    assert [dataset[i] for i in range(len(dataset))] == synthetic_rows(1, 6)


def test_a_file_without_gsm8k_columns_is_refused_naming_them(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps({"problem": "1+1", "solution": "#### 2"}) + "\n")
    with pytest.raises(ValueError, match="missing \\['question', 'answer'\\]"):
        data.load_split(data.parse_source(str(path)), progress=False)


def test_select_returns_problems_with_reference_answers():
    dataset = data.load_split(data.parse_source("synthetic?size=40"), progress=False)
    problems = data.select(dataset, (32, 33))
    assert [p.row for p in problems] == [32, 33]
    assert problems[0].question == synthetic_row(0, 32)["question"]
    assert problems[0].reference == "448"


def test_select_names_a_row_without_a_final_number(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n"
                    + json.dumps({"question": "q2", "answer": "about two"}) + "\n")
    dataset = data.load_split(data.parse_source(str(path)), progress=False)
    with pytest.raises(ValueError, match="row 1: answer"):
        data.select(dataset, (0, 1))


def test_select_refuses_rows_outside_the_split():
    dataset = data.load_split(data.parse_source("synthetic?size=10"), progress=False)
    with pytest.raises(ValueError, match="outside .* 10 rows"):
        data.select(dataset, (9, 10))


@pytest.mark.parametrize("text, rows", [
    ("32-159", tuple(range(32, 160))), ("7", (7,)), ("0,5,7-9", (0, 5, 7, 8, 9)),
    (" 3 - 4 ", (3, 4)),
], ids=["seed-range", "one", "mixed", "spaces"])
def test_parse_rows(text, rows):
    assert data.parse_rows(text) == rows


@pytest.mark.parametrize("text, match", [
    ("9-3", "ends before"), ("a-b", "expected ranges"), ("1,1", "more than once"),
    ("", "expected ranges"), ("-3", "expected ranges"),
], ids=["reversed", "letters", "repeat", "empty", "negative"])
def test_bad_rows_are_refused(text, match):
    with pytest.raises(ValueError, match=match):
        data.parse_rows(text)


def test_default_size_matches_the_gsm8k_test_split():
    assert DEFAULT_SIZE == 1319
