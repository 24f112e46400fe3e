"""benchmarks/profile_decode.py: what runs without a GPU (its prompts, its summary line, and a
clean refusal where it cannot time anything)."""

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "profile_decode.py"


@pytest.fixture(scope="module")
def profile_decode():
    spec = importlib.util.spec_from_file_location("profile_decode", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_prefix_always_gets_the_same_prompt_inside_the_vocabulary(profile_decode):
    first, again = profile_decode._prompt(300, 259), profile_decode._prompt(300, 259)
    assert first == again and len(first) == 300
    assert all(0 <= t < 259 for t in first)
    assert profile_decode._prompt(301, 259)[:300] != first


def test_the_progress_line_names_each_prefix_and_its_replay(profile_decode):
    cells = [{"prefix": 128, "replay_ms": 3.21}, {"prefix": 2048, "replay_ms": 3.5}]
    assert profile_decode.replay_summary(cells) == (
        "; prefix 128 replay 3.210 ms; prefix 2048 replay 3.500 ms")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU-only machine")
def test_without_a_gpu_it_refuses_in_one_line(profile_decode, tmp_path, capsys):
    assert profile_decode.main([str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs a CUDA GPU" in err
