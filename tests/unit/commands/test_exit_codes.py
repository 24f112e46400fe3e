"""One exit-code contract for every command (issue 38): 2 with one line naming the file for a
bad checkpoint (missing folder, truncated safetensors, corrupt config.json), 130 with one
line for Ctrl-C, 4 with the traceback and a "please report" line for a det-suite bug, and
tracebacks for input errors only under --debug."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from det_suite.cli import main
from det_suite.errors import BUG_LINE

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory):
    from det_suite.models.synthetic import write_synthetic
    return write_synthetic("tiny", 0, tmp_path_factory.mktemp("tiny"))


def _missing(root, tmp_path):
    return tmp_path / "no-such-checkpoint", "no such folder"


def _truncated(root, tmp_path):
    copy = shutil.copytree(root, tmp_path / "truncated")
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    return copy, "model.safetensors: not a readable safetensors file"


def _corrupt_config(root, tmp_path):
    copy = shutil.copytree(root, tmp_path / "corrupt")
    (copy / "config.json").write_text((copy / "config.json").read_text()[:40])
    return copy, "config.json: not valid JSON"


def _config_without_field(root, tmp_path):
    copy = shutil.copytree(root, tmp_path / "fieldless")
    config = json.loads((copy / "config.json").read_text())
    del config["vocab_size"]
    (copy / "config.json").write_text(json.dumps(config))
    return copy, "config.json: field 'vocab_size' is None; expected a positive integer"


BAD_INPUTS = {"missing-path": _missing, "truncated-safetensors": _truncated,
              "corrupt-config": _corrupt_config, "config-without-field": _config_without_field}

# Each command that loads a --model, with arguments that keep it CPU-small.
COMMANDS = {
    "cache-hit": lambda model, out: ["cache-hit", "--model", model, "--out", str(out),
                                     "--device", "cpu", "--preset", "small"],
    "reference-check": lambda model, out: ["reference-check", "--model", model, "--prompts",
                                           "1", "--device", "cpu"],
    "gsm8k-record": lambda model, out: ["gsm8k", "record", "--model", model, "--fixtures",
                                        str(out), "--device", "cpu", "--no-progress"],
    "serve": lambda model, out: ["serve", "--model", model, "--device", "cpu", "--port", "0"],
}


def _one_error_line(err: str, phrase: str) -> None:
    lines = [line for line in err.splitlines()
             if line.strip() and "Triton interpreter" not in line]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and phrase in lines[0], err


@pytest.mark.parametrize("bad", BAD_INPUTS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_checkpoint_exits_2_with_one_line_naming_the_file(
        command, bad, good_checkpoint, tmp_path, capsys):
    model, phrase = BAD_INPUTS[bad](good_checkpoint, tmp_path)
    assert main(COMMANDS[command](str(model), tmp_path / "out")) == 2
    _one_error_line(capsys.readouterr().err, phrase)


def test_the_good_checkpoint_loads(good_checkpoint):
    """Control for the cases above: the checkpoint they damage is a good one."""
    from det_suite.models.spec import load_model
    assert load_model(str(good_checkpoint)).config.vocab_size > 0


def test_debug_shows_the_traceback_of_an_input_error(tmp_path, capsys):
    args = ["--debug"] + COMMANDS["reference-check"](str(tmp_path / "none"), tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "ModelSpecError" in err and "no such folder" in err


# Where each command spends its time; Ctrl-C is simulated there.
INTERRUPT_AT = {
    "run": ("det_suite.checks.main_job.run_main_job", ["run"]),
    "invariance": ("det_suite.commands.invariance.run_invariance", ["invariance"]),
    "cache-hit": ("det_suite.checks.cache_hit.run_cache_hit", ["cache-hit", "--device", "cpu"]),
    "reference-check": ("det_suite.checks.reference_agreement.run_reference_agreement",
                        ["reference-check"]),
    "gsm8k-record": ("det_suite.checks.gsm8k.record_gsm8k", ["gsm8k", "record"]),
    "synth": ("det_suite.models.synthetic.write_synthetic",
              ["synth", "--preset", "tiny", "--out"]),
}


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("command", INTERRUPT_AT)
def test_ctrl_c_exits_130_with_one_line_and_leaves_no_output(command, tmp_path, capsys,
                                                              monkeypatch):
    target, args = INTERRUPT_AT[command]
    monkeypatch.chdir(tmp_path)   # default output folders land here, if anywhere
    monkeypatch.setattr(target, _interrupt)
    if args[-1] == "--out":
        args = args + [str(tmp_path / "synth-out")]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "interrupted (Ctrl-C)" in err, err
    assert [line for line in err.splitlines() if "interrupted" in line] == \
        [line for line in err.splitlines() if line.strip() and "Triton" not in line]
    assert not (tmp_path / "results").exists() and not (tmp_path / "synth-out").exists()


def test_an_unexpected_exception_exits_4_with_the_traceback_and_asks_for_a_report(
        tmp_path, capsys, monkeypatch):
    def bug(*args, **kwargs):
        raise ZeroDivisionError("a det-suite bug")
    monkeypatch.setattr("det_suite.checks.reference_agreement.run_reference_agreement", bug)
    assert main(["reference-check"]) == 4
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err and BUG_LINE in err


def test_a_missing_file_argument_exits_2_without_a_traceback(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "a.json: no such file" in err


def _bit_flipped(root, tmp_path):
    copy = shutil.copytree(root, tmp_path / "flipped")
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-5000] ^= 0x01      # one bit of a weight, well past the header
    (copy / "model.safetensors").write_bytes(bytes(data))
    return copy


def test_a_bit_flipped_weight_is_another_model_to_a_fixture(good_checkpoint, tmp_path):
    """A flipped weight bit is a valid checkpoint (it loads, and determinism is still
    checked on it: exit 0 for cache-hit), but it is not the model a fixture recorded:
    `gsm8k check` calls the pair not comparable (3), naming the model."""
    from det_suite.gsm8k.identity import model_identity, same_model
    from det_suite.models.spec import load_model

    flipped = _bit_flipped(good_checkpoint, tmp_path)
    assert load_model(str(flipped)).config.vocab_size > 0
    before, after = model_identity(str(good_checkpoint)), model_identity(str(flipped))
    assert not same_model(before, after)
    assert same_model(before, model_identity(str(good_checkpoint)))   # control


def test_gsm8k_check_of_an_edited_fixture_hash_exits_1_naming_the_row(tmp_path, capsys):
    fixture = next((REPO / "fixtures/gsm8k/synthetic-tiny-seed0").glob("*.json"))
    payload = json.loads(fixture.read_text())
    payload["rows"][0]["tokens_sha256"] = "0" * 64
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(payload))
    assert main(["gsm8k", "check", "--fixture", str(edited), "--no-progress",
                 "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"row {payload['rows'][0]['row']}: tokens_sha256" in err and "Traceback" not in err


# One bad argument or path per command: exit 2, one line, no traceback.
BAD_ARGUMENTS = {
    "run-out-under-a-file": (["run", "--out", "{file}/run"], "file: file exists (expected"),
    "invariance-unknown-shape": (["invariance", "--shapes", "no-such-shape", "--out",
                                  "{tmp}/inv"], "no-such-shape"),
    "lint-policy-missing-table": (["lint-policy", "--table", "{tmp}/none.json"], "none.json"),
    "synth-negative-seed": (["synth", "--preset", "tiny", "--seed", "-1", "--out",
                             "{tmp}/s"], "--seed must be non-negative"),
    "report-missing-input": (["report", "{tmp}/none", "--out", "{tmp}/r"], "does not exist"),
    "gsm8k-check-missing-fixture": (["gsm8k", "check", "--fixture", "{tmp}/none.json",
                                     "--no-progress", "--out", "{tmp}/g"], "none.json"),
    "tune-unknown-shape": (["tune", "--out", "{tmp}/t.json", "--shapes", "no-such-shape"],
                           "no-such-shape"),
}


@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_a_bad_argument_exits_2_with_one_line(case, tmp_path, capsys):
    args, phrase = BAD_ARGUMENTS[case]
    (tmp_path / "file").write_text("")
    args = [a.format(tmp=tmp_path, file=tmp_path / "file") for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "Triton" not in line
             and "CPU only" not in line and not line.startswith("det-suite invariance on")]
    assert "Traceback" not in err and phrase in err, err
    assert len([line for line in lines if phrase in line]) == 1, err


def test_commands_on_a_bit_flipped_checkpoint(good_checkpoint, tmp_path, capsys):
    """The table's bit-flip rows: determinism is still checked on it (cache-hit 0), and a
    fixture of the original model is not comparable with it (gsm8k check 3)."""
    flipped = str(_bit_flipped(good_checkpoint, tmp_path))
    assert main(["cache-hit", "--model", flipped, "--out", str(tmp_path / "hit"), "--device",
                 "cpu", "--preset", "small", "--modes", "det", "--engines", "eager",
                 "--prefixes", "8", "--batches", "1", "--repetitions", "1"]) == 0
    fixtures = tmp_path / "fixtures"
    run = ["--device", "cpu", "--no-progress", "--rows", "32"]
    assert main(["gsm8k", "record", "--model", str(good_checkpoint), "--fixtures",
                 str(fixtures), "--max-new-tokens", "1", *run]) == 0
    [fixture] = fixtures.rglob("*.json")
    capsys.readouterr()
    assert main(["gsm8k", "check", "--fixture", str(fixture), "--model", flipped,
                 "--out", str(tmp_path / "check"), *run]) == 3
    assert "NOT COMPARABLE" in capsys.readouterr().out


def test_serve_on_a_port_in_use_exits_2_with_one_line(good_checkpoint, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", str(good_checkpoint), "--device", "cpu",
                     "--port", str(port)]) == 2
    _one_error_line(capsys.readouterr().err, f"cannot listen on 127.0.0.1:{port}")


@pytest.mark.parametrize("args, phrase", [(["--port", "70000"], "--port must be in"),
                                          (["--num-pages", "0"], "--num-pages >= 1"),
                                          (["--cuda-graph", "--device", "cpu"],
                                           "--cuda-graph needs a CUDA device")])
def test_serve_refuses_bad_arguments_before_loading_anything(args, phrase, capsys):
    assert main(["serve", "--model", "synthetic:tiny?seed=0", *args]) == 2
    _one_error_line(capsys.readouterr().err, phrase)


def test_ctrl_c_while_the_commands_load_exits_130_with_one_line(monkeypatch, capsys):
    import det_suite.cli as cli

    monkeypatch.setattr(cli, "build_parser", _interrupt)
    assert main(["run"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip() == \
        "det-suite: interrupted (Ctrl-C) before the command started"

