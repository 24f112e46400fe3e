"""tools/pingpong_gemm_sweep.py --cross-compile: every arm of the two-warpgroup promotion
kernel compiles for sm_90a with Triton's ptxas, without spills or serialised wgmma, and each
math partition issues one interval's k32 MMA steps.

Gluon kernels do not run under Triton's interpreter, so on the CPU what can be checked is
the compiled program; the bits and times are the GPU sweep's (it checks the shipped bits per
cell). The tool runs in a subprocess without TRITON_INTERPRET (a compile needs the real JIT).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from det_suite.platform.interpreter import environment_without_interpreter

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "pingpong_gemm_sweep.py"
K_STEP = 32  # the k of one FP8 wgmma instruction
MATH_PARTITIONS = 2


@pytest.fixture(scope="module")
def cross_compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("pingpong")
    done = subprocess.run([sys.executable, str(TOOL), str(out), "--cross-compile"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=environment_without_interpreter())
    assert (out / "cross_compile.json").exists(), done.stderr[-2000:]
    report = json.loads((out / "cross_compile.json").read_text())
    print(f"{len(report['arms'])} arms cross-compiled, bad: {report['bad']}")
    return done.returncode, report


def test_the_tool_exits_zero_when_every_arm_is_clean(cross_compiled):
    returncode, report = cross_compiled
    assert (returncode == 0) == (not report["bad"])
    assert returncode == 0, report["bad"]


def test_every_arm_compiles(cross_compiled):
    _, report = cross_compiled
    assert report["arms"]
    assert [row["arm"] for row in report["arms"] if "error" in row] == []


def test_no_arm_spills_or_serialises_its_wgmma(cross_compiled):
    _, report = cross_compiled
    for row in report["arms"]:
        assert row["spill_store_bytes"] == 0, row["arm"]
        assert not [w for w in row["warnings"] if "C7514" in w], row["arm"]


def test_each_math_partition_issues_one_interval_of_k32_steps(cross_compiled):
    _, report = cross_compiled
    for row in report["arms"]:
        expected = MATH_PARTITIONS * row["config"]["promote_k"] // K_STEP
        assert row["wgmma"] == expected, row["arm"]
