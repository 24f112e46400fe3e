"""benchmarks/control_arms.py: its defaults are issue 39's matrix (prefix 128 / 2048 / 8192 x
batch 1 / 4, fast-stock first so every ratio is to it); the run itself needs a GPU for
numbers (tools/gpu_control.sh), the tiny model on a CPU only as a smoke test."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "control_arms.py"


def _module():
    spec = importlib.util.spec_from_file_location("control_arms", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_defaults_are_the_issue_matrix_with_fast_stock_as_the_reference():
    args = _module()._parse(["out.json"])
    assert args.prefixes == (128, 2048, 8192) and args.batches == (1, 4)
    assert args.arms.split(",")[0] == "fast-stock"
    assert args.model.startswith("synthetic:qwen3-8b")


def test_lists_are_parsed_as_ints():
    args = _module()._parse(["o.json", "--prefixes", "8,16", "--batches", "2"])
    assert (args.prefixes, args.batches) == ((8, 16), (2,))
