"""Programmatic dependent launch (PDL) for the batch-invariant ops' kernels: on SM90+ GPUs
each launch may start while the kernel before it drains, and waits for it
(griddepcontrol.wait) before touching memory. PDL moves a launch, never its arithmetic.

On the CPU: every launch description sets the kernel's wait (USE_PDL) and the launch
attribute (launch_pdl) together, off by default, and changes nothing else; the ops turn
both on exactly where `programmatic_launch` says (never on the interpreter); a PDL launch
compiles to the plain launch's instructions plus the wait (sm_90 PTX). Where the wait lands
is the lint's rule (test_bi_lint.py). On a GPU: a decode step's small ops back
to back, each reading what the one before wrote, give with PDL the bytes they give without,
eager and under CUDA Graph replay, with every intermediate poisoned between runs so a read
before the producer's write shows.
"""

import json
import re
import subprocess
import sys
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
import torch

from det_suite.kernels import registry
from det_suite.kernels.grid_dependency import RELEASE_FIRST
from det_suite.lint import op_kernels, specialize
from det_suite.lint.worker import WORKER_FLAG, WORKER_MODULE, worker_env
from det_suite.ops import run_kernel
from det_suite.ops.batch_invariant import bf16_linear, log_softmax, qk_norm_rope_write, rms_norm
from det_suite.ops.bi_launch_spec import (log_softmax_launch_spec, matmul_launch_spec,
                                          mul_quantize_launch_spec, pdl_launch,
                                          qk_norm_rope_launch_spec, rmsnorm_launch_spec,
                                          rmsnorm_quantize_launch_spec)
from det_suite.ops.launch import PDL_ENV, programmatic_launch
from det_suite.ops.quantized_inputs import (add_rms_norm_quantized_stacked, mul_quantized,
                                            rms_norm_quantized, silu_mul_quantized)

SPECS = {
    "matmul": lambda **pdl: matmul_launch_spec(8, 64, 32, has_bias=False, **pdl),
    "rmsnorm": lambda **pdl: rmsnorm_launch_spec(8, 64, 1e-6, **pdl),
    "rmsnorm-quantize": lambda **pdl: rmsnorm_quantize_launch_spec(8, 64, 1e-6, 3, **pdl),
    "add-rmsnorm-quantize": lambda **pdl: rmsnorm_quantize_launch_spec(8, 64, 1e-6, 2,
                                                                       residual=True, **pdl),
    "mul-quantize": lambda **pdl: mul_quantize_launch_spec(8, 64, **pdl),
    "silu-mul-quantize": lambda **pdl: mul_quantize_launch_spec(8, 64, silu_a=True, **pdl),
    "log-softmax-partials": lambda **pdl: log_softmax_launch_spec(8, 64, **pdl)[0],
    "log-softmax": lambda **pdl: log_softmax_launch_spec(8, 64, **pdl)[1],
    "qk-norm-rope": lambda **pdl: qk_norm_rope_launch_spec(8, 4, 2, 16, 64, 1e-6, **pdl),
}


def _without(pairs, name):
    return tuple(pair for pair in pairs if pair[0] != name)


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("pdl, expected", [({}, False), ({"pdl": False}, False),
                                           ({"pdl": True}, True)], ids=["default", "off", "on"])
def test_launch_spec_sets_the_wait_and_the_launch_attribute_together(name, pdl, expected):
    call = SPECS[name](**pdl)
    assert (dict(call.constexprs)["USE_PDL"], dict(call.options)["launch_pdl"]) == \
        (expected, expected)


@pytest.mark.parametrize("name", list(SPECS))
def test_pdl_changes_nothing_else_in_the_launch(name):
    on, off = SPECS[name](pdl=True), SPECS[name](pdl=False)
    assert (on.kernel, on.grid, on.args, _without(on.constexprs, "USE_PDL"),
            _without(on.options, "launch_pdl")) == \
        (off.kernel, off.grid, off.args, _without(off.constexprs, "USE_PDL"),
         _without(off.options, "launch_pdl"))


# Device names only: the capability is faked, so no GPU is touched (module level, where
# the GPU-marker scan does not read them as a test using CUDA).
FAKED_GPU = torch.device("cuda", 0)
FAKED_CAPABILITIES = [
    ("cpu", (9, 0), False), (torch.device("cpu"), (12, 0), False),
    ("cuda", (8, 0), False), ("cuda:0", (8, 9), False),
    ("cuda", (9, 0), True), (torch.device("cuda", 0), (10, 0), True), ("cuda", (12, 0), True),
]


@pytest.mark.parametrize("device, capability, expected", FAKED_CAPABILITIES,
                         ids=["cpu", "cpu-device", "sm80", "sm89", "sm90", "sm100", "sm120"])
def test_programmatic_launch_is_on_for_cuda_devices_of_sm90_and_newer(
        monkeypatch, device, capability, expected):
    """A CPU tensor runs on the interpreter, which has no grid dependencies, whatever GPU
    the machine holds."""
    from det_suite.ops import launch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    launch._capability_major.cache_clear()       # the answer is cached per device index
    try:
        assert programmatic_launch(device) is expected
    finally:
        launch._capability_major.cache_clear()


@pytest.mark.parametrize("setting, expected", [("0", False), ("1", True),
                                              ("early", RELEASE_FIRST)],
                         ids=["off", "default", "early"])
def test_det_suite_pdl_chooses_plain_pdl_or_release_first(monkeypatch, setting, expected):
    """DET_SUITE_PDL=early keeps PDL and has the op kernels release the next launch before
    they wait (the same bits; which order is faster is measured)."""
    from det_suite.ops import launch

    monkeypatch.setenv(PDL_ENV, setting)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    launch._capability_major.cache_clear()
    try:
        assert programmatic_launch(FAKED_GPU) is expected
        assert programmatic_launch("cpu") is False
    finally:
        launch._capability_major.cache_clear()


def test_an_unknown_det_suite_pdl_value_is_refused(monkeypatch):
    monkeypatch.setenv(PDL_ENV, "yes")
    with pytest.raises(ValueError, match="DET_SUITE_PDL must be one of 0, 1, early; got 'yes'"):
        programmatic_launch("cpu")


@pytest.mark.parametrize("pdl, use_pdl", [(False, False), (True, True),
                                          (RELEASE_FIRST, RELEASE_FIRST)],
                         ids=["plain", "pdl", "release-first"])
def test_the_release_order_reaches_the_kernel_with_the_launch_attribute(pdl, use_pdl):
    constexprs, options = pdl_launch(pdl)
    assert (dict(constexprs)["USE_PDL"], dict(options)["launch_pdl"]) == (use_pdl, bool(pdl))


@pytest.mark.parametrize("pdl, releases_first", [(True, False), (RELEASE_FIRST, True)],
                         ids=["wait-then-release", "release-first"])
def test_release_first_kernels_release_before_waiting_and_still_wait_first(pdl, releases_first):
    """Cross-compiled for sm_90: either order waits before any global access; only the
    release (griddepcontrol.launch_dependents) moves."""
    from det_suite.lint import compile_outcomes
    from det_suite.lint.ptx_grid_dependency import GridDependencyOrder

    kernel = registry.entry("bi_rmsnorm_quantize_kernel")
    _label, launch = op_kernels.op_kernel_launches(kernel.name, pdl=pdl)[0]
    (outcome,) = compile_outcomes([specialize(launch, kernel.module, kernel.name, 90)],
                                  workers=1)
    assert outcome.ok, outcome.error
    order = GridDependencyOrder(**outcome.grid_dependency)
    assert order.waits_first and order.launches_dependents
    assert order.releases_before_wait is releases_first


# ---------------------------------------------------------------- the ops pass the flag

T, H, HQ, HKV, D = 3, 32, 4, 2, 16


def _ops(device: str = "cpu"):
    """Every op on small tensors of `device`, each taking a recording launcher (nothing is
    launched, so the CUDA device works here too)."""
    bf16 = torch.bfloat16
    zeros, ones = partial(torch.zeros, device=device), partial(torch.ones, device=device)
    x, w = zeros(T, H, dtype=bf16), ones(H, dtype=bf16)
    scales = [ones(1) for _ in range(3)]
    cache = zeros(2, 4, HKV, D, dtype=bf16)
    rope = zeros(T, D, dtype=bf16)
    return {
        "bf16_linear": lambda launcher: bf16_linear(x, zeros(8, H, dtype=bf16),
                                                    launcher=launcher),
        "rms_norm": lambda launcher: rms_norm(x, w, 1e-6, launcher=launcher),
        "log_softmax": lambda launcher: log_softmax(x, launcher=launcher),
        "qk_norm_rope_write": lambda launcher: qk_norm_rope_write(
            zeros(T, HQ, D, dtype=bf16), zeros(T, HKV, D, dtype=bf16),
            zeros(T, HKV, D, dtype=bf16), ones(D, dtype=bf16),
            ones(D, dtype=bf16), 1e-6, rope, rope, cache, cache.clone(),
            torch.arange(T, device=device), launcher=launcher),
        "rms_norm_quantized": lambda launcher: rms_norm_quantized(x, w, 1e-6, scales,
                                                                  launcher=launcher),
        "add_rms_norm_quantized_stacked": lambda launcher: add_rms_norm_quantized_stacked(
            x, x.clone(), w, 1e-6, scales, launcher=launcher),
        "mul_quantized": lambda launcher: mul_quantized(x, x.clone(), scales[0],
                                                        launcher=launcher),
        "silu_mul_quantized": lambda launcher: silu_mul_quantized(x, x.clone(), scales[0],
                                                                  launcher=launcher),
    }


def _recorded_keywords(op) -> list[dict]:
    keywords = []
    op(lambda kernel, call, args, kw: keywords.append(kw))
    return keywords


@pytest.mark.parametrize("name", list(_ops()))
@pytest.mark.parametrize("pdl", [False, True], ids=["answer-off", "answer-on"])
def test_op_launches_with_pdl_where_programmatic_launch_says(monkeypatch, device, name, pdl):
    """Each op asks `programmatic_launch` about its input's device and launches its kernel
    with the answer (here faked, so a CPU run can say yes)."""
    asked = []

    def fake(device):
        asked.append(torch.device(device).type)
        return pdl

    for module in ("batch_invariant", "quantized_inputs"):
        monkeypatch.setattr(f"det_suite.ops.{module}.programmatic_launch", fake)
    keywords = _recorded_keywords(_ops(device)[name])
    assert keywords and asked and set(asked) == {device}  # once a call or once a launch
    assert [(kw["USE_PDL"], kw["launch_pdl"]) for kw in keywords] == [(pdl, pdl)] * len(keywords)


@pytest.mark.parametrize("name", list(_ops()))
def test_op_on_a_cpu_tensor_launches_without_pdl(device, name):
    if device != "cpu":
        pytest.skip("CPU tensors reach a kernel only under Triton's interpreter; "
                    "this run has a CUDA device and no interpreter")
    keywords = _recorded_keywords(_ops()[name])
    assert keywords and \
        [(kw["USE_PDL"], kw["launch_pdl"]) for kw in keywords] == [(False, False)] * len(keywords)


# ---------------------------------------------------------------- on the GPU

PDL_FAMILIES = [pytest.param("sm90", marks=[pytest.mark.gpu, pytest.mark.sm90], id="sm90"),
                pytest.param("sm120", marks=[pytest.mark.gpu, pytest.mark.sm120], id="sm120")]
PDL_REPLAYS = 10


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)  # NaN compares equal to itself as bytes


class SmallOpChain:
    """A decode step's small ops at Qwen3-8B's widths, back to back, each reading what the
    one before wrote: the residual add + norm + quantize, the norm of its sum, a q/k/v
    projection, q/k norm + RoPE + KV write, a gate|up projection of the result, its
    silu-product and plain product quantized, a norm quantized, the lm_head (a 32k slice of
    the vocabulary) and its log_softmax. `force_plain` launches every kernel without PDL
    (the reference); otherwise every launch must come with PDL."""

    HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, ROWS = 4096, 32, 8, 128, 12288, 32768, 8

    def __init__(self, force_plain: bool):
        self.force_plain = force_plain
        self.launched_pdl: list[bool] = []
        g = torch.Generator(device="cuda").manual_seed(0)

        def randn(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g, device="cuda") * scale).to(torch.bfloat16)

        h, d = self.HIDDEN, self.HEAD_DIM
        qkv_width = (self.HEADS + 2 * self.KV_HEADS) * d
        self.x, self.delta = randn(self.ROWS, h), randn(self.ROWS, h)
        self.norm_weight, self.head_weight = randn(h) + 1, randn(d) + 1
        self.w_qkv = randn(qkv_width, h, scale=h ** -0.5)
        self.w_gate_up = randn(2 * self.INTER, h, scale=h ** -0.5)
        self.lm_head = randn(self.VOCAB, h, scale=h ** -0.5)
        self.cos, self.sin = randn(self.ROWS, d), randn(self.ROWS, d)
        self.scales = [torch.full((1,), s, device="cuda") for s in (0.02, 0.05, 0.1)]
        self.k_cache = torch.zeros(16, 16, self.KV_HEADS, d, dtype=torch.bfloat16,
                                   device="cuda")
        self.v_cache = torch.zeros_like(self.k_cache)
        self.slots = torch.arange(3, 3 + self.ROWS, device="cuda")

    def _launch(self, kernel, call, args, keywords):
        self.launched_pdl.append(keywords["launch_pdl"])
        if self.force_plain:
            keywords = {**keywords, "USE_PDL": False, "launch_pdl": False}
        return run_kernel(kernel, call, args, keywords)

    def run(self) -> dict[str, torch.Tensor]:
        eps, launch, n = 1e-6, self._launch, self.ROWS
        q_w, kv_w = self.HEADS * self.HEAD_DIM, self.KV_HEADS * self.HEAD_DIM
        summed, stacked = add_rms_norm_quantized_stacked(
            self.x, self.delta, self.norm_weight, eps, self.scales, launcher=launch)
        normed = rms_norm(summed, self.norm_weight, eps, launcher=launch)
        qkv = bf16_linear(normed, self.w_qkv, launcher=launch)
        q = qkv[:, :q_w].view(n, self.HEADS, self.HEAD_DIM)
        k = qkv[:, q_w:q_w + kv_w].view(n, self.KV_HEADS, self.HEAD_DIM)
        v = qkv[:, q_w + kv_w:].view(n, self.KV_HEADS, self.HEAD_DIM)
        q_out = qk_norm_rope_write(q, k, v, self.head_weight, self.head_weight, eps, self.cos,
                                   self.sin, self.k_cache, self.v_cache, self.slots,
                                   launcher=launch)
        attended = q_out.reshape(n, self.HIDDEN)
        gate_up = bf16_linear(attended, self.w_gate_up, launcher=launch)
        gate, up = gate_up[:, :self.INTER], gate_up[:, self.INTER:]
        silu_product = silu_mul_quantized(gate, up, self.scales[0], launcher=launch)
        product = mul_quantized(gate, up, self.scales[1], launcher=launch)
        (normed_q,) = rms_norm_quantized(attended, self.norm_weight, eps, self.scales[:1],
                                         launcher=launch)
        logits = bf16_linear(attended, self.lm_head, launcher=launch)
        return dict(summed=summed, stacked=stacked, normed=normed, qkv=qkv, q_out=q_out,
                    k_cache=self.k_cache, v_cache=self.v_cache, gate_up=gate_up,
                    silu_product=silu_product, product=product, normed_q=normed_q,
                    logits=logits, logprobs=log_softmax(logits, launcher=launch))

    @staticmethod
    def poison(outs: dict[str, torch.Tensor]) -> None:
        """Every buffer a kernel of the chain reads to all bytes 0xFF (NaN in bf16, fp32 and
        e4m3): a kernel that reads one before its producer rewrote it sees NaN. The caches
        are only written here (and their other slots must keep their zeros)."""
        for name, out in outs.items():
            if name not in ("k_cache", "v_cache"):
                out.view(torch.uint8).fill_(0xFF)


@pytest.mark.graph
@pytest.mark.parametrize("family", PDL_FAMILIES)
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("release", ["1", "early"], ids=["wait-then-release", "release-first"])
def test_gpu_small_ops_with_pdl_give_the_bytes_of_plain_launches(family, mode, release,
                                                                 bit_exact, monkeypatch):
    """Either release order (DET_SUITE_PDL=1 or =early): the bytes of plain launches, with
    every buffer poisoned between runs, so a kernel that read early would show."""
    monkeypatch.setenv(PDL_ENV, release)
    assert programmatic_launch("cuda"), "SM90+ launches the ops with PDL"
    reference = SmallOpChain(force_plain=True)
    expected = {name: _bytes(out).clone() for name, out in reference.run().items()}
    torch.cuda.synchronize()
    chain = SmallOpChain(force_plain=False)
    outs = chain.run()  # compiles every kernel before a graph captures them
    torch.cuda.synchronize()
    if mode == "graph":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = chain.run()
    assert chain.launched_pdl and all(chain.launched_pdl)
    wrong = []
    for replay in range(PDL_REPLAYS):
        chain.poison(outs)
        if mode == "graph":
            graph.replay()
        else:  # the poisoned blocks go back to the allocator, which hands them out again
            del outs
            outs = chain.run()
        torch.cuda.synchronize()
        wrong += [f"{name} (run {replay})" for name, out in outs.items()
                  if not bit_exact(_bytes(out), expected[name])]
    print(f"{PDL_REPLAYS * len(expected)} bit-exact comparisons, {len(wrong)} differ")
    assert wrong == []


# ---------------------------------------------------------------- the PTX: same arithmetic

OWN_KERNELS = ("bi_matmul_kernel", "bi_rmsnorm_kernel", "bi_log_softmax_kernel",
               "bi_qk_norm_rope_kernel", "bi_rmsnorm_quantize_kernel", "bi_mul_quantize_kernel")


def _compiled_ptx(jobs, tmp_path) -> list[str]:
    """PTX of compile jobs from one lint worker (outside the interpreter)."""
    jobs_path, out_path = tmp_path / "jobs.json", tmp_path / "out.json"
    jobs_path.write_text(json.dumps([job.to_json() for job in jobs]))
    subprocess.run([sys.executable, "-m", WORKER_MODULE, WORKER_FLAG, str(jobs_path),
                    str(out_path), str(tmp_path / "ptx")], env=worker_env(), check=True)
    results = json.loads(out_path.read_text())
    assert all(r["ok"] for r in results), [r["error"] for r in results if not r["ok"]]
    return [Path(r["ptx_path"]).read_text() for r in results]


def _opcodes(ptx: str) -> Counter:
    """How often each instruction occurs, griddepcontrol left out: register numbers and
    the order the scheduler picks aside, what the program computes."""
    statements = (line.split("//")[0].strip() for line in ptx.splitlines())
    return Counter(re.sub(r"^@!?%\w+\s+", "", s).split()[0].rstrip(";") for s in statements
                   if s and not s.startswith((".", "$", "{", "}", ")", "("))
                   and "griddepcontrol" not in s)


def test_a_pdl_launch_compiles_the_plain_launchs_instructions_and_the_wait(tmp_path):
    """sm_90 PTX of each kernel's model launch, plain and with PDL: the same instructions,
    plus griddepcontrol.wait and launch_dependents. PDL adds the wait, nothing else."""
    jobs = []
    for name in OWN_KERNELS:
        kernel = registry.entry(name)
        for pdl in (False, True):
            _label, launch = op_kernels.op_kernel_launches(name, pdl=pdl)[-1]
            jobs.append(specialize(launch, kernel.module, name, 90))
    listings = _compiled_ptx(jobs, tmp_path)
    for name, plain, pdl in zip(OWN_KERNELS, listings[::2], listings[1::2]):
        assert "griddepcontrol" not in plain and "griddepcontrol.wait" in pdl, name
        assert _opcodes(pdl) == _opcodes(plain), name
