"""The recorded GSM8K fixtures in fixtures/gsm8k/ hold on this machine: the tiny synthetic
model's on the CPU (kernels on the Triton interpreter, run by .ci/run), the 8B-shaped
synthetic model's on a GPU of the family it was recorded on. A fixture for another family
or stack is not comparable here: the test is skipped with the reasons, never passed."""

import copy
import json
from pathlib import Path

import pytest

pytest.importorskip("datasets", reason="needs datasets (pip install 'det-suite[gsm8k]')")

from det_suite.checks.gsm8k import CheckSettings, check_gsm8k, verdict_lines  # noqa: E402
from det_suite.gsm8k.diff import diff_rows  # noqa: E402
from det_suite.gsm8k.fixture import FixtureError, fixture_path, read_fixture  # noqa: E402
from det_suite.gsm8k.identity import sha256_ids  # noqa: E402

pytestmark = pytest.mark.model

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gsm8k"


def _check(model: str, device: str, *, stages: int | None = None, **run_options):
    result = check_gsm8k(CheckSettings(fixtures=str(FIXTURES), model=model, device=device,
                                       stages=stages, progress=False), **run_options)
    for line in verdict_lines(result):
        print(line)
    if result.status == "not comparable":
        pytest.skip("no fixture comparable with this machine: " + "; ".join(result.reasons))
    return result


@pytest.fixture(scope="module")
def tiny_check(tiny):
    return _check("synthetic:tiny?seed=0", "cpu", checkpoint=tiny)


def test_the_tiny_models_fixture_checks_exact_on_the_cpu(tiny_check):
    assert tiny_check.status == "exact", verdict_lines(tiny_check)
    assert tiny_check.diffs and all(d.tokens_equal and d.text_equal for d in tiny_check.diffs)
    assert all(d.expected_tokens > 0 for d in tiny_check.diffs)


def test_the_tiny_models_fixture_checks_exact_with_the_kernel_pinned_to_two_stages(tiny):
    """The fixture was recorded on each tile's own pipeline depth; the depth moves loads,
    never the arithmetic, so the pinned run must give the same tokens and texts."""
    result = _check("synthetic:tiny?seed=0", "cpu", stages=2, checkpoint=tiny)
    assert result.status == "exact", verdict_lines(result)
    assert result.run.settings["fp8_stages"] == 2


def test_a_fixture_with_one_token_changed_names_the_row_and_first_token(tiny_check):
    """The same real run against a copy of the fixture with one recorded token changed (its
    hash recomputed, so the file is valid): the row fails at that token."""
    tampered = copy.deepcopy(tiny_check.fixture_payload["rows"])
    row = tampered[-1]
    position = len(row["token_ids"]) - 1
    row["token_ids"][position] += 1
    row["tokens_sha256"] = sha256_ids(row["token_ids"])
    diffs = diff_rows(tampered, tiny_check.run.rows, decode=tiny_check.run.decode)
    bad = [d for d in diffs if not d.exact]
    assert [(d.row, d.status, d.first_token) for d in bad] == [(row["row"], "differs",
                                                                position)]
    assert f"first differing token at output position {position}" in bad[0].detail


def test_a_fixture_with_one_tampered_hash_is_refused_naming_the_row(tiny_check, tmp_path):
    payload = copy.deepcopy(tiny_check.fixture_payload)
    payload["rows"][0]["tokens_sha256"] = "0" * 64
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(FixtureError, match=f"row {payload['rows'][0]['row']}: tokens_sha256"):
        read_fixture(path)


def test_the_checked_in_fixtures_are_valid_and_named_by_their_keys():
    paths = sorted(FIXTURES.rglob("*.json"))
    assert paths, f"no fixture under {FIXTURES}"
    for path in paths:
        payload = read_fixture(path)
        assert all("text" not in r for r in payload["rows"]), f"{path}: texts in a fixture"
        assert path == fixture_path(FIXTURES, payload["key"]), f"{path}: not where its key says"


@pytest.mark.gpu
@pytest.mark.graph
@pytest.mark.slow
def test_the_8b_shaped_models_fixture_checks_exact_on_the_gpu():
    """The seed's run on synthetic:qwen3-8b (128 rows, 512 new tokens, CUDA Graph decode,
    det mode), against the fixture recorded on this GPU family."""
    result = _check("synthetic:qwen3-8b?seed=0", "cuda")
    assert result.status == "exact", verdict_lines(result)
    assert len(result.diffs) == 128
