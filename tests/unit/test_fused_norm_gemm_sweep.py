"""tools/fused_norm_gemm_sweep.py: its fused producer + decode GEMM (the norm before q/k/v and
gate/up, the SiLU product before down, split-K included) gives the shipped two-launch bits
(output and residual sum), and its comparison can see a changed rounding.

The sweep times the arms on a GPU; on the CPU (Triton's interpreter, the SM90 table's
swapped decode tile) it runs the same launches at small shapes with the same segment
structure, so what can be checked here is the bits.
"""

from pathlib import Path

import pytest

from det_suite.bench.sweep_cli import load_tool

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fused_norm_gemm_sweep.py"


@pytest.fixture(scope="module")
def sweep():
    return load_tool(TOOL)


@pytest.fixture(scope="module", params=[("qkv", 1), ("qkv", 3), ("gate_up", 1), ("gate_up", 3),
                                        ("down", 1), ("down", 3)],
                ids=lambda p: f"{p[0]}-m{p[1]}")
def comparison(request, sweep, kernel_device):
    name, m = request.param
    _name, segments, k, producer = next(s for s in sweep.CPU_SHAPES if s[0] == name)
    cell = sweep.CELLS[producer](segments, k, m, kernel_device)
    result = sweep.compare_arms(cell, sweep.ARMS)
    print({arm: row["differing_elements"] for arm, row in result.items()})
    return result


def test_the_fused_arm_gives_the_shipped_output_and_residual_sum(comparison):
    assert comparison["fused"]["equal"], comparison["fused"]


def test_the_control_arm_is_flagged(comparison, sweep):
    assert not comparison[sweep.CONTROL]["equal"]


@pytest.mark.parametrize("argv, message", [
    (["out", "--ms", "1,x"], "comma-separated integers"),
    (["out", "--ms", "0"], "integers >= 1"),
])
def test_the_command_line_refuses_what_it_cannot_run(sweep, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep.main(argv + ["--device", "cpu"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
