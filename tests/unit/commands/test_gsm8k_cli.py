"""`det-suite gsm8k` argument handling and the exit codes that need no model run: usage
errors (2), a corrupt fixture (1), a fixture for another platform (3)."""

import json

import pytest

pytest.importorskip("datasets", reason="needs datasets (pip install 'det-suite[gsm8k]')")

from det_suite.cli import main  # noqa: E402
from det_suite.gsm8k.fixture import write_fixture  # noqa: E402
from tests.unit.gsm8k.test_gsm8k_support import H200_PLATFORM, run  # noqa: E402


@pytest.fixture(scope="module")
def payload():
    return run().payload({}, texts=False)


@pytest.mark.parametrize("args, message", [
    (["gsm8k", "record", "--rows", "9-3"], "rows"),
    (["gsm8k", "record", "--max-new-tokens", "0"], "max_new_tokens"),
    (["gsm8k", "record", "--shots", "40"], "few-shot"),
    (["gsm8k", "record", "--data", "synthetic?seed=x"], "data"),
    (["gsm8k", "check", "--batch-size", "0", "--model", "synthetic:tiny?seed=0"],
     "batch-size"),
    (["gsm8k", "check"], "model: required"),
    (["gsm8k", "record", "--stages", "9"], "stages: expected one of"),
    (["gsm8k", "record", "--stages", "2", "--mode", "stock"], "stages: pins"),
], ids=["bad-rows", "zero-tokens", "rows-are-exemplars", "bad-data", "zero-batch",
        "check-without-fixture-or-model", "stages-out-of-range", "stages-on-the-control"])
def test_usage_errors_exit_2_naming_the_argument(args, message, capsys, tmp_path):
    assert main(args + (["--fixtures", str(tmp_path)] if args[1] == "record" else [])) == 2
    assert message in capsys.readouterr().err


def test_gsm8k_without_a_subcommand_prints_help_and_exits_2(capsys):
    assert main(["gsm8k"]) == 2
    assert "record" in capsys.readouterr().err


def test_a_corrupt_fixture_fails_the_check(tmp_path, capsys, payload):
    bad = json.loads(json.dumps(payload))
    bad["rows"][0]["tokens_sha256"] = "0" * 64
    path = tmp_path / "f.json"
    path.write_text(json.dumps(bad))
    assert main(["gsm8k", "check", "--fixture", str(path), "--out", str(tmp_path / "o")]) == 1
    assert "FAILED" in capsys.readouterr().err


def test_a_fixture_for_another_family_exits_3_and_says_why(tmp_path, capsys, payload):
    other = json.loads(json.dumps(payload))
    other["key"]["platform"] = dict(H200_PLATFORM)
    other["settings"]["device"] = H200_PLATFORM["device"]
    path = write_fixture(tmp_path / "f.json", other)
    out_dir = tmp_path / "o"
    code = main(["gsm8k", "check", "--fixture", str(path), "--device", "cpu", "--out",
                 str(out_dir), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "NOT COMPARABLE" in out and "gpu_family: recorded sm90" in out
    check = json.loads((out_dir / "check.json").read_text())
    assert check["status"] == "not comparable" and not (out_dir / "run.json").exists()
