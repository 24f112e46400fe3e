"""ModelSpec: a --model value parsed once into what it names (a synthetic preset and seed, a
local path, a hub id); a value that names nothing is an InputError saying what was expected."""

import pytest

from det_suite.errors import InputError
from det_suite.models.spec import ModelSpec, is_synthetic


@pytest.mark.parametrize("text,preset,seed", [
    ("synthetic:tiny", "tiny", 0), ("synthetic:tiny?seed=7", "tiny", 7),
    ("synthetic:qwen3-8b?seed=0", "qwen3-8b", 0)])
def test_a_synthetic_spec_gives_its_preset_and_seed(text, preset, seed):
    spec = ModelSpec.parse(text)
    assert (spec.kind, spec.preset, spec.seed, str(spec)) == ("synthetic", preset, seed, text)
    assert spec.synthetic and is_synthetic(text) and is_synthetic(spec)


def test_an_existing_folder_is_a_path(tmp_path):
    spec = ModelSpec.parse(str(tmp_path))
    assert (spec.kind, spec.path, spec.hub_id) == ("path", tmp_path, None)
    assert not is_synthetic(spec)


def test_owner_slash_name_that_is_no_folder_is_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = ModelSpec.parse("nvidia/Qwen3-8B-FP8")
    assert (spec.kind, spec.hub_id, spec.path) == ("hub", "nvidia/Qwen3-8B-FP8", None)


def test_parsing_a_parsed_spec_returns_it():
    spec = ModelSpec.parse("synthetic:tiny?seed=1")
    assert ModelSpec.parse(spec) is spec


@pytest.mark.parametrize("text,phrase", [
    ("synthetic:nope", "preset one of"), ("synthetic:tiny?seed=-1", "non-negative"),
    ("synthetic:tiny?seed=x", "seed must be"), ("synthetic:tiny?size=2", "preset one of"),
    ("synthetic:tiny?seed=1&seed=2", "preset one of"), ("", "expected"),
    ("/no/such/folder", "no such folder"), ("./a/b/c", "no such folder")],
    ids=["unknown-preset", "negative-seed", "non-integer-seed", "unknown-option",
         "two-seeds", "empty", "missing-absolute-path", "missing-relative-path"])
def test_a_spec_that_names_nothing_is_an_input_error(text, phrase):
    with pytest.raises(InputError, match=phrase):
        ModelSpec.parse(text)

