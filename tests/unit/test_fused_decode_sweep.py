"""tools/fused_decode_sweep.py: a decode step whose stacked projections normalise their own
input (the fused norm + GEMM prototype, and the down projection its SiLU product) generates the shipped det mode's ids and logprobs bit
for bit, the fused path provably ran, and the comparison flags a changed rounding.

On the CPU (Triton's interpreter, `synthetic:tiny-wide`, whose q/k/v and gate/up are stacked)
with the SM90 tables, so the decode GEMMs are the swapped tile the prototype extends.
"""

from pathlib import Path

import pytest

from det_suite.bench.sweep_cli import load_tool

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fused_decode_sweep.py"
TOKENS = 4


@pytest.fixture(scope="module")
def sweep():
    return load_tool(TOOL)


@pytest.fixture(scope="module")
def generations(sweep, kernel_device):
    """Per arm: (generation, fused launches) of one short greedy decode."""
    from det_suite.models.spec import load_model

    ckpt = load_model("synthetic:tiny-wide?seed=0", device=kernel_device)
    prototype = sweep.sibling("fused_norm_gemm_sweep")
    prompt = sweep.sibling("profile_decode")._prompt(20, ckpt.config.vocab_size)
    result = {}
    with sweep.sm90_tables():
        for arm in ("shipped", "fused-all", sweep.CONTROL):
            _engine, gen, fused = sweep.run_arm(ckpt, arm, prototype, device=kernel_device,
                                                cuda_graph=False, prompt=prompt, tokens=TOKENS)
            result[arm] = (gen, fused)
    return result


def test_the_fused_arm_fused_every_decode_steps_producers(generations):
    # two layers, each with two stacked groups and the down projection, TOKENS - 1 decode
    # steps (the first token comes from the prefill, which runs the shipped ops)
    assert generations["fused-all"][1] == 2 * 3 * (TOKENS - 1)


def test_the_fused_arm_generates_the_shipped_bits(generations):
    assert generations["fused-all"][0] == generations["shipped"][0]


def test_the_control_arm_is_flagged(generations, sweep):
    assert generations[sweep.CONTROL][1] > 0
    assert generations[sweep.CONTROL][0] != generations["shipped"][0]


def test_an_unknown_arm_is_refused_by_name(sweep, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(["out", "--arms", "shipped,fastest", "--device", "cpu"])
    assert exit_info.value.code == 2
    assert "unknown fastest" in capsys.readouterr().err
