"""The library on the CPU, used as a user would: no pytest plugin, no CLI (issue 10).

A fresh Python process either has TRITON_INTERPRET=1 set by hand or leaves it unset; the
interpreter switch must then choose the interpreter (torch without CUDA) or explain what
to do, and the kernels must compute the GPU's bits (NaN rows, BF16 rounding) without any
caller asking for GPU-faithful numerics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import det_suite
from det_suite.ops import fp8_linear, fp8_scaled_mm, quantize_fp8
from det_suite.platform import gpu_faithful_interpreter, interpreter
from det_suite.platform.interpreter import INTERPRET_ENV, LIBRARY_ANNOUNCE

# What a user's script does: NaN in one row, integer operands whose BF16 epilogue needs
# rounding to nearest even (see test_cpu_truth_numerics.py), compared with torch.
USER_SCRIPT = """
import json, torch
{prelude}
from det_suite.ops import fp8_linear
from det_suite.platform import gpu_faithful_interpreter
gen = torch.Generator().manual_seed(3)
x = torch.randint(-8, 9, (24, 32), generator=gen).float()
w = torch.randint(-8, 9, (64, 32), generator=gen).float().to(torch.float8_e4m3fn)
one, scale = torch.ones(()), torch.tensor(1.0 + 2.0 ** -8)
y = fp8_linear(x.bfloat16(), w, scale, one)
expected = ((x.double() @ w.double().T).float() * scale).bfloat16()
x[5, 3] = float("nan")
nan_rows = fp8_linear(x.bfloat16(), w, scale, one).isnan().any(dim=1).nonzero().flatten()
print(json.dumps({{"bf16_exact": torch.equal(y, expected), "nan_rows": nan_rows.tolist(),
                  "gpu_faithful": gpu_faithful_interpreter.installed()}}))
"""
# Makes this process look like one with a CPU-only torch, so the test means the same on a
# GPU runner (whose torch has CUDA) as on the CPU.
AS_CPU_ONLY_TORCH = "torch.version.cuda = None; torch.version.hip = None"
CHOOSE_FOR_LIBRARY = ("from det_suite.platform.interpreter import default_for_library\n"
                      "assert default_for_library()")


def run_user_script(prelude: str, interpret: str | None) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if k != INTERPRET_ENV}
    if interpret is not None:
        env[INTERPRET_ENV] = interpret
    done = subprocess.run([sys.executable, "-c", USER_SCRIPT.format(prelude=prelude)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


EXPECTED = {"bf16_exact": True, "nan_rows": [5], "gpu_faithful": True}


def test_library_with_interpret_set_by_hand_computes_the_gpu_bits():
    result, _ = run_user_script("", interpret="1")
    assert result == EXPECTED


def test_library_chooses_the_interpreter_on_a_torch_without_cuda_and_says_so_once():
    result, stderr = run_user_script(f"{AS_CPU_ONLY_TORCH}\n{CHOOSE_FOR_LIBRARY}",
                                     interpret=None)
    assert (result, stderr.count(LIBRARY_ANNOUNCE)) == (EXPECTED, 1)


def test_importing_the_ops_on_a_torch_without_cuda_is_enough():
    result, stderr = run_user_script(AS_CPU_ONLY_TORCH, interpret=None)
    assert (result, stderr.count(LIBRARY_ANNOUNCE)) == (EXPECTED, 1)


def test_importing_det_suite_chooses_nothing_and_imports_no_triton():
    """`import det_suite` stays cheap: only importing the ops throws the switch."""
    env = {k: v for k, v in os.environ.items() if k != INTERPRET_ENV}
    script = ("import json, os, sys; import det_suite; print(json.dumps(["
              f"'triton' in sys.modules, 'torch' in sys.modules, "
              f"os.environ.get({INTERPRET_ENV!r})]))")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, json.loads(done.stdout), done.stderr) == (0, [False, False, None], "")


# An interpreter det-suite cannot make GPU-faithful (a future Triton's changed shape).
UNPATCHABLE_TRITON = f"""
import json, torch
{AS_CPU_ONLY_TORCH}
from det_suite.platform import gpu_faithful_interpreter
def changed_shape():
    raise RuntimeError("this Triton's interpreter has changed shape")
gpu_faithful_interpreter._interpreter_module = changed_shape
from det_suite.ops import quantize_fp8
try:
    quantize_fp8(torch.zeros(2, 32, dtype=torch.bfloat16), torch.ones(()))
    print(json.dumps(None))
except RuntimeError as exc:
    print(json.dumps(str(exc)))
"""


def test_importing_the_ops_never_fails_and_the_first_launch_says_why():
    env = {k: v for k, v in os.environ.items() if k != INTERPRET_ENV}
    done = subprocess.run([sys.executable, "-c", UNPATCHABLE_TRITON], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == \
        "this Triton's interpreter has changed shape"


# The ops' one device check is the interpreter switch's (require_kernel_device): its
# message, naming the op's first tensor argument. Operands: bf16 x, its FP8 a, FP8 weight.
OP_CALLS = {
    "quantize_fp8": ("x", lambda x, a, w, one: quantize_fp8(x, one)),
    "fp8_linear": ("x", lambda x, a, w, one: fp8_linear(x, w, one, one)),
    "fp8_scaled_mm": ("a", lambda x, a, w, one: fp8_scaled_mm(a, w, one, one)),
}


@pytest.mark.parametrize("op", list(OP_CALLS))
def test_ops_refuse_cpu_tensors_with_the_switchs_explanation(monkeypatch, op):
    name, call = OP_CALLS[op]
    x = torch.ones(2, 32, dtype=torch.bfloat16)
    a, w = x.to(torch.float8_e4m3fn), torch.ones(16, 32).to(torch.float8_e4m3fn)
    monkeypatch.setenv(INTERPRET_ENV, "0")
    with pytest.raises(ValueError, match=rf"^{name} is on cpu; det-suite's kernels run on a "
                                         rf"CUDA device, or on the CPU under Triton's "
                                         rf"interpreter, which TRITON_INTERPRET='0' turns off"):
        call(x, a, w, torch.ones(()))


# A device *name* for checks that never allocate there (no GPU needed): only the device
# check's answer for it is tested.
FAKED_GPU = "cuda"


# ---------------------------------------------------------------- the switch's decisions

@pytest.mark.parametrize("case", ["user-chose-0", "triton-already-imported", "torch-has-cuda"])
def test_library_default_leaves_the_choice_alone(monkeypatch, case):
    monkeypatch.delenv(INTERPRET_ENV, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "12.8" if case == "torch-has-cuda" else None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    if case == "user-chose-0":
        monkeypatch.setenv(INTERPRET_ENV, "0")
    if case == "torch-has-cuda":
        monkeypatch.setattr(interpreter, "triton_imported", lambda: False)
    before = os.environ.get(INTERPRET_ENV)
    assert (interpreter.default_for_library(), os.environ.get(INTERPRET_ENV)) == (False, before)


@pytest.mark.parametrize("device", [FAKED_GPU, f"{FAKED_GPU}:1", "meta"])
def test_kernel_device_check_accepts_gpu_and_meta_tensors_anywhere(monkeypatch, device):
    monkeypatch.setenv(INTERPRET_ENV, "0")
    assert interpreter.require_kernel_device("x", torch.device(device)) is None


def test_kernel_device_check_on_the_interpreter_makes_it_gpu_faithful(monkeypatch):
    monkeypatch.setenv(INTERPRET_ENV, "1")
    interpreter.require_kernel_device("x", torch.device("cpu"))
    assert gpu_faithful_interpreter.installed()


EXPLANATIONS = {
    "interpreter-turned-off": (
        {INTERPRET_ENV: "0"}, None, False,
        r"x is on cpu; .* which TRITON_INTERPRET='0' turns off: set TRITON_INTERPRET=1 in the "
        r"environment before Python imports triton or det_suite"),
    "cpu-torch-triton-imported-first": (
        {}, None, False,
        r"x is on cpu; .* this torch has no CUDA support, so only on the CPU under Triton's "
        r"interpreter; Triton was imported before det-suite could choose it: set "
        r"TRITON_INTERPRET=1"),
    "cuda-torch-no-gpu": (
        {}, "12.8", False,
        r"x is on cpu; .* this machine has none, so only on the CPU under Triton's interpreter: "
        r"set TRITON_INTERPRET=1"),
    "cpu-tensor-on-a-gpu-machine": (
        {}, "12.8", True,
        r"x is on cpu; .*\(this machine has one: move the tensors there, e\.g\. \.cuda\(\)\)"),
}


@pytest.mark.parametrize("case", list(EXPLANATIONS))
def test_kernel_device_check_explains_what_to_do(monkeypatch, case):
    env, cuda_build, cuda_available, message = EXPLANATIONS[case]
    monkeypatch.delenv(INTERPRET_ENV, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(torch.version, "cuda", cuda_build)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_available)
    with pytest.raises(ValueError, match=message):
        interpreter.require_kernel_device("x", torch.device("cpu"))


# ---------------------------------------------------------------- one place

def _installers(package: Path) -> list[str]:
    """Modules that switch the GPU-faithful numerics on (or patch the interpreter)."""
    needles = ("make_gpu_faithful(", "gpu_faithful_interpreter.install(", "InterpreterBuilder")
    return sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                  if any(needle in path.read_text() for needle in needles))


def test_gpu_faithful_numerics_are_switched_on_by_the_interpreter_switch_only():
    package = Path(det_suite.__file__).parent
    assert _installers(package) == ["platform/gpu_faithful_interpreter.py",
                                    "platform/interpreter.py"]
