"""The GSM8K fixture format: its hashes, its file (versioned schema, one row per line,
atomic), its validation, its name, and when two keys are comparable."""

import copy
import hashlib
import json

import pytest

pytest.importorskip("datasets", reason="needs datasets (pip install 'det-suite[gsm8k]')")

from det_suite.gsm8k import fixture as fx  # noqa: E402
from det_suite.gsm8k.identity import (comparability, policy_info, sha256_ids,  # noqa: E402
                                      sha256_text)
from tests.unit.gsm8k.test_gsm8k_support import run  # noqa: E402


@pytest.fixture(scope="module")
def payload():
    return run().payload({"host": "test"}, texts=False)


def test_sha256_ids_hashes_the_decimal_ids_joined_by_commas():
    assert sha256_ids([1, 22, 333]) == hashlib.sha256(b"1,22,333").hexdigest()


def test_sha256_ids_of_no_tokens_is_the_empty_digest():
    assert sha256_ids([]) == hashlib.sha256(b"").hexdigest()


def test_sha256_text_hashes_utf8():
    assert sha256_text("é") == hashlib.sha256("é".encode("utf-8")).hexdigest()


def test_a_row_holds_the_hashes_of_what_it_names():
    from det_suite.gsm8k.answers import Extracted
    row = fx.output_row(row=3, question="Q?", prompt=(1, 2), text="#### 4", token_ids=(7, 8),
                        stopped=True, answer=Extracted("4", "marker"), reference="4",
                        keep_text=True)
    assert row["question_sha256"] == sha256_text("Q?")
    assert row["prompt_sha256"] == sha256_ids((1, 2)) and row["prompt_tokens"] == 2
    assert row["text_sha256"] == sha256_text("#### 4") and row["text"] == "#### 4"
    assert row["tokens_sha256"] == sha256_ids((7, 8)) and row["token_ids"] == [7, 8]
    assert row["correct"] is True and row["answer_source"] == "marker"


def test_a_fixture_round_trips_through_its_file(tmp_path, payload):
    path = fx.write_fixture(tmp_path / "f.json", payload)
    assert fx.read_fixture(path) == json.loads(json.dumps(payload))


def test_the_file_has_one_row_per_line(tmp_path, payload):
    text = fx.write_fixture(tmp_path / "f.json", payload).read_text()
    row_lines = [line for line in text.splitlines() if line.lstrip().startswith('{"row": ')]
    assert len(row_lines) == len(payload["rows"])


def test_a_fixture_carries_schema_key_policy_settings_and_environment(payload):
    assert payload["kind"] == "gsm8k" and payload["schema"] == fx.SCHEMA
    assert set(payload["key"]) == set(fx.KEY_FIELDS)
    assert payload["key"]["model"] == {"kind": "synthetic", "preset": "tiny", "seed": 0}
    assert payload["settings"]["max_new_tokens"] == 24
    assert payload["settings"]["prompt"]["format"] == "det-suite/gsm8k-prompt/1"
    assert payload["policy"]["sha256"] and payload["environment"] == {"host": "test"}
    assert "text" not in payload["rows"][0]


def _edited(payload, edit):
    out = copy.deepcopy(payload)
    edit(out)
    return out


@pytest.mark.parametrize("edit, match", [
    (lambda p: p.update(schema="det-suite/gsm8k-fixture/0"), "schema"),
    (lambda p: p.update(kind="cache-hit"), "kind"),
    (lambda p: p.pop("policy"), "missing fields \\['policy'\\]"),
    (lambda p: p["key"].pop("stack"), "key"),
    (lambda p: p.update(rows=[]), "non-empty"),
    (lambda p: p["rows"][1].pop("text_sha256"), "row 33: missing field 'text_sha256'"),
    (lambda p: p["rows"][1].update(correct="yes"), "row 33: correct: expected bool"),
    (lambda p: p["rows"][1].update(text_sha256="abc"), "row 33: text_sha256: expected 64"),
    (lambda p: p["rows"][1].update(tokens_sha256="0" * 64), "row 33: tokens_sha256 .* not the "
                                                            "hash of its own token_ids"),
    (lambda p: p["rows"][1]["token_ids"].append(1), "row 33: tokens_sha256"),
    (lambda p: p["rows"][1].update(row=32), "row 32: appears twice"),
], ids=["old-schema", "other-kind", "no-policy", "key-without-stack", "no-rows",
        "row-without-field", "wrong-type", "malformed-hash", "tampered-token-hash",
        "tampered-token-ids", "duplicate-row"])
def test_a_bad_fixture_is_refused_naming_the_field(tmp_path, payload, edit, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_edited(payload, edit)))
    with pytest.raises(fx.FixtureError, match=match):
        fx.read_fixture(path)


def test_writing_refuses_an_invalid_payload_and_leaves_no_file(tmp_path, payload):
    with pytest.raises(fx.FixtureError):
        fx.write_fixture(tmp_path / "f.json", _edited(payload, lambda p: p.pop("rows")))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content, match", [(None, "no such fixture"), ("{", "not JSON")],
                         ids=["missing", "not-json"])
def test_an_unreadable_fixture_is_refused(tmp_path, content, match):
    path = tmp_path / "f.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(fx.FixtureError, match=match):
        fx.read_fixture(path)


def _key(**changes):
    key = {"model": {"kind": "synthetic", "preset": "tiny", "seed": 0}, "backend": "embedded",
           "mode": "det",
           "platform": {"device": "cuda", "interpreter": False, "tile_family": "sm90",
                        "gpu_family": "sm90", "gpu": "NVIDIA H200", "capability": "9.0"},
           "stack": {"torch": "2.11.0+cu130", "torch_cuda": "13.0", "triton": "3.6.0"}}
    for path, value in changes.items():
        group, _, name = path.partition(".")
        if name:
            key[group][name] = value
        else:
            key[group] = value
    return key


def test_the_fixture_path_names_model_backend_mode_platform_and_stack():
    path = fx.fixture_path("fixtures/gsm8k", _key())
    assert path.as_posix() == ("fixtures/gsm8k/synthetic-tiny-seed0/"
                               "embedded-det__sm90__torch-2.11.0+cu130_triton-3.6.0.json")


def test_a_cpu_fixture_is_named_for_the_interpreter():
    key = _key(**{"platform.device": "cpu", "platform.interpreter": True,
                  "platform.gpu_family": None, "stack.numpy": "2.2.6"})
    assert "__cpu-interpreter__" in fx.fixture_name(key)
    assert fx.fixture_name(key).endswith("_numpy-2.2.6.json")


def test_the_same_key_is_comparable():
    assert comparability(_key(), _key()) == []


def test_another_gpu_of_the_same_family_is_comparable():
    assert comparability(_key(), _key(**{"platform.gpu": "NVIDIA H100 80GB HBM3"})) == []


@pytest.mark.parametrize("changes, reason", [
    ({"platform.gpu_family": "sm120", "platform.tile_family": "sm120",
      "platform.capability": "12.0"}, "platform gpu_family: recorded sm90, this run sm120"),
    ({"platform.device": "cpu"}, "platform device"),
    ({"stack.triton": "3.8.0"}, "stack triton: recorded 3.6.0, this run 3.8.0"),
    ({"stack.torch": "2.14.1+cu130"}, "stack torch"),
    ({"mode": "stock"}, "mode: recorded det, this run stock"),
    ({"backend": "sglang"}, "backend"),
    ({"model": {"kind": "synthetic", "preset": "tiny", "seed": 1}}, "model"),
], ids=["other-family", "other-device", "other-triton", "other-torch", "other-mode",
        "other-backend", "other-model"])
def test_another_family_stack_mode_or_model_is_not_comparable(changes, reason):
    reasons = comparability(_key(), _key(**changes))
    assert any(reason in r for r in reasons), reasons


def test_models_at_different_paths_with_the_same_content_are_comparable():
    a = _key(model={"kind": "path", "name": "ckpt", "content_sha256": "a" * 64})
    b = _key(model={"kind": "hub", "id": "o/ckpt", "revision": "r", "content_sha256": "a" * 64})
    assert comparability(a, b) == []


def test_policy_info_hashes_the_families_table_and_kernel_sources():
    sm90, sm120 = policy_info("sm90"), policy_info("sm120")
    assert sm90["table_sha256"] != sm120["table_sha256"]
    assert sm90["kernels_sha256"] == sm120["kernels_sha256"]
    assert sm90["sha256"] != sm120["sha256"]
