"""The batch-invariant ops in the instruction lint: the lint binds the same launch
descriptions the ops launch (`ops.bi_launch_spec`), and its rule flags an op kernel whose
launches mix MMA instructions or use another operand format."""

import pytest
import torch

from det_suite.kernels import registry
from det_suite.lint import op_kernels, specialize
from det_suite.lint.jobs import CompileJob
from det_suite.lint.ptx_instructions import MmaInstruction
from det_suite.lint.worker import CompileOutcome
from det_suite.ops.batch_invariant import bf16_linear, log_softmax, paged_attention, rms_norm
from det_suite.ops.quantized_inputs import (add_rms_norm_quantized_stacked, mul_quantized,
                                            rms_norm_quantized, silu_mul_quantized)
from tests.unit.lint.test_policy_lint import _recorded_job, _Recorder


def _record(op) -> list:
    recorder = _Recorder()
    op(recorder)
    return recorder.calls


def _attention(launcher, tokens, requests, page):
    q = torch.empty(tokens, op_kernels.Q_HEADS, op_kernels.HEAD_DIM, dtype=torch.bfloat16)
    cache = torch.empty(op_kernels.CACHE_BLOCKS, page, op_kernels.KV_HEADS,
                        op_kernels.HEAD_DIM, dtype=torch.bfloat16)
    starts = torch.linspace(0, tokens, requests + 1).to(torch.int32)
    paged_attention(q, cache, cache,
                    torch.zeros(requests, op_kernels.MAX_BLOCKS, dtype=torch.int32),
                    torch.zeros(requests, dtype=torch.int32), starts,
                    op_kernels.HEAD_DIM ** -0.5, launcher=launcher)


H, V = op_kernels.HIDDEN, op_kernels.VOCAB
OPS = {
    "bi_matmul_kernel": lambda m: lambda launcher: bf16_linear(
        torch.empty(m, H, dtype=torch.bfloat16), torch.empty(V, H, dtype=torch.bfloat16),
        launcher=launcher),
    "bi_rmsnorm_kernel": lambda m: lambda launcher: rms_norm(
        torch.empty(m, H, dtype=torch.bfloat16), torch.empty(H, dtype=torch.bfloat16), 1e-6,
        launcher=launcher),
    "bi_log_softmax_kernel": lambda m: lambda launcher: log_softmax(
        torch.empty(m, V, dtype=torch.bfloat16), launcher=launcher),
    "bi_rmsnorm_quantize_kernel": lambda m: lambda launcher: rms_norm_quantized(
        torch.empty(m, H, dtype=torch.bfloat16), torch.empty(H, dtype=torch.bfloat16), 1e-6,
        [torch.ones(1) for _ in range(3)], launcher=launcher),
    "bi_mul_quantize_kernel": lambda m: lambda launcher: mul_quantized(
        torch.empty(m, H, dtype=torch.bfloat16), torch.empty(m, H, dtype=torch.bfloat16),
        torch.ones(1), launcher=launcher),
}
# The kernels an op's call launches, where that is more than the one it is keyed by.
OP_CALL_KERNELS = {"bi_log_softmax_kernel": ["bi_log_softmax_partials_kernel",
                                             "bi_log_softmax_kernel"]}
CASES = [(name, (m,)) for name in OPS for m in op_kernels.ROW_COUNTS] + [
    ("paged_attention", call) for call in op_kernels.ATTENTION_CALLS]


@pytest.mark.parametrize("name, shape", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_lint_launch_mirrors_the_op(name, shape):
    if name == "paged_attention":  # one launch shape a call: one kernel, or two
        calls = _record(lambda launcher: _attention(launcher, *shape))
        label = "T={} R={} page={}".format(*shape)
    else:
        calls = _record(OPS[name](*shape))
        label = f"M={shape[0]}"
        assert [recorded[1].kernel for recorded in calls] == OP_CALL_KERNELS.get(name, [name])
    for recorded in calls:
        kernel = recorded[1].kernel
        assert recorded[0] is registry.kernel(kernel)
        launches = dict(op_kernels.op_kernel_launches(kernel))
        assert _recorded_job(recorded) == specialize(launches[label],
                                                     registry.entry(kernel).module, kernel, 90)


@pytest.mark.parametrize("m", op_kernels.ROW_COUNTS, ids=lambda m: f"M={m}")
def test_lint_launch_mirrors_the_residual_add_norm(m):
    """The norm feeding FP8 linears with the residual add before it: its own launches."""
    rows = torch.empty(m, H, dtype=torch.bfloat16)
    (recorded,) = _record(lambda launcher: add_rms_norm_quantized_stacked(
        rows, torch.empty_like(rows), torch.empty(H, dtype=torch.bfloat16), 1e-6,
        [torch.ones(1) for _ in range(3)], launcher=launcher))
    kernel = "bi_rmsnorm_quantize_kernel"
    launches = dict(op_kernels.op_kernel_launches(kernel))
    assert recorded[0] is registry.kernel(kernel)
    assert _recorded_job(recorded) == specialize(launches[f"M={m} residual"],
                                                 registry.entry(kernel).module, kernel, 90)


@pytest.mark.parametrize("m", op_kernels.ROW_COUNTS, ids=lambda m: f"M={m}")
def test_lint_launch_mirrors_the_silu_product(m):
    """silu(gate) * up quantized, gate and up the halves of one gate|up GEMM output: the
    model's MLP launch, its own launches (the last one linted)."""
    gate_up = torch.empty(m, 2 * H, dtype=torch.bfloat16)
    (recorded,) = _record(lambda launcher: silu_mul_quantized(
        gate_up[:, :H], gate_up[:, H:], torch.ones(1), launcher=launcher))
    kernel = "bi_mul_quantize_kernel"
    launches = dict(op_kernels.op_kernel_launches(kernel))
    assert recorded[0] is registry.kernel(kernel)
    assert _recorded_job(recorded) == specialize(launches[f"M={m} silu"],
                                                 registry.entry(kernel).module, kernel, 90)
    assert op_kernels.op_kernel_launches(kernel)[-1][0] == f"M={op_kernels.ROW_COUNTS[-1]} silu"


@pytest.mark.parametrize("shape, kernels", [
    ((1, 1, 16), ["bi_paged_attention_split_kernel", "bi_paged_attention_combine_kernel"]),
    ((8, 8, 1), ["bi_paged_attention_split_kernel", "bi_paged_attention_combine_kernel"]),
    ((4096, 1, 16), ["bi_paged_attention_kernel"]),
    ((37, 2, 1), ["bi_paged_attention_kernel"]),
], ids=["decode", "decode-batch", "prefill", "ragged"])
def test_attention_decode_calls_take_the_split_shape(shape, kernels):
    calls = _record(lambda launcher: _attention(launcher, *shape))
    assert [recorded[1].kernel for recorded in calls] == kernels


def _outcomes(kernel, summaries):
    """Fake compile outcomes: launch i holds the instruction summaries[i]."""
    out = {}
    for (_label, job), inst in zip(op_kernels.op_kernel_jobs(kernel, 90), summaries):
        out[job.key] = CompileOutcome(ok=True, instructions=[inst])
    return out


def _mma(family, k_step, operand):
    return MmaInstruction(family=family, opcode=f"{family}.m64n64k{k_step}.f32.{operand}",
                          m=64, n=64, k_step=k_step, a_type=operand, b_type=operand,
                          acc_type="f32")


@pytest.mark.parametrize("kernel_name", [k.name for k in op_kernels.MMA_OP_KERNELS])
def test_one_instruction_across_launches_passes(kernel_name):
    kernel = registry.entry(kernel_name)
    n = len(op_kernels.op_kernel_jobs(kernel, 90))
    result, violations = op_kernels.lint_op_kernel(
        kernel, 90, _outcomes(kernel, [_mma("wgmma", 16, "bf16")] * n))
    assert (result.status, violations) == ("ok", [])


@pytest.mark.parametrize("kernel_name", [k.name for k in op_kernels.MMA_OP_KERNELS])
@pytest.mark.parametrize("odd, match", [
    (_mma("mma.sync", 16, "bf16"), "mix MMA instructions"),
    (_mma("wgmma", 16, "f16"), "operands f16, not bf16"),
], ids=["mixed-family", "wrong-operand"])
def test_a_launch_with_another_instruction_is_a_violation(kernel_name, odd, match):
    kernel = registry.entry(kernel_name)
    n = len(op_kernels.op_kernel_jobs(kernel, 90))
    result, violations = op_kernels.lint_op_kernel(
        kernel, 90, _outcomes(kernel, [_mma("wgmma", 16, "bf16")] * (n - 1) + [odd]))
    assert result.status == "violation" and match in violations[0]


def test_compile_jobs_are_plain_data():
    kernel = registry.entry("bi_paged_attention_kernel")
    jobs = [job for _label, job in op_kernels.op_kernel_jobs(kernel, 90)]
    assert all(isinstance(job, CompileJob) and job.key for job in jobs)
    constants = [dict(job.constexprs) for job in jobs]
    # Triton compiles one request and one-token pages as constants: separate kernels.
    assert any(c.get("num_requests") == 1 for c in constants)
    assert any(c.get("block_size") == 1 for c in constants)
    assert any("num_requests" not in c and "block_size" not in c for c in constants)


def test_split_attention_kernel_must_hold_the_tile_kernels_instruction():
    """A decode row has a prefill row's bits only if one MMA instruction computes both."""
    kernel = registry.entry("bi_paged_attention_split_kernel")
    own = len(op_kernels.op_kernel_launches(kernel.name))
    partner = len(op_kernels.op_kernel_jobs(kernel, 90)) - own
    assert partner == len(op_kernels.op_kernel_launches("bi_paged_attention_kernel"))
    result, violations = op_kernels.lint_op_kernel(
        kernel, 90, _outcomes(kernel, [_mma("wgmma", 16, "bf16")] * own
                              + [_mma("mma.sync", 16, "bf16")] * partner))
    assert result.status == "violation" and "bi_paged_attention_kernel T=" in violations[0]


# ------------------------------------------------------------ programmatic dependent launch

WAITS_FIRST = dict(waits=True, launches_dependents=True, first_access="ld.global.b32",
                   access_before_wait=None)
LOADS_BEFORE_WAIT = dict(WAITS_FIRST, access_before_wait="ld.global.b32 %r1, [%rd1]")


def _is_pdl(job) -> bool:
    flags = (dict(job.constexprs).get("USE_PDL"), dict(job.options).get("launch_pdl"))
    # USE_PDL is True, or RELEASE_FIRST (2) for the DET_SUITE_PDL=early order: either way set
    # exactly when the launch attribute is.
    assert bool(flags[0]) == bool(flags[1]), \
        f"{job.attr}: USE_PDL and launch_pdl disagree: {flags}"
    return bool(flags[1])


@pytest.mark.parametrize("capability, pdl", [(80, False), (89, False), (90, True),
                                             (100, True), (120, True)],
                         ids=lambda v: f"sm_{v}" if isinstance(v, int) else None)
def test_op_kernels_are_linted_with_pdl_on_sm90_and_newer(capability, pdl):
    """Every op launch again with PDL where the ops launch with it, in both release orders
    (DET_SUITE_PDL=1 and =early), so its wait is checked; before SM90 none."""
    for kernel in op_kernels.linted_op_kernels(capability):
        jobs = [(label, job) for label, job in op_kernels.op_kernel_jobs(kernel, capability)
                if not label.startswith(tuple(op_kernels.SAME_MMA_AS.values()))]
        pdl_labels = [label for label, job in jobs if _is_pdl(job)]
        plain = [label for label, _launch in op_kernels.op_kernel_launches(kernel.name)]
        launched_pdl = pdl and kernel.name in op_kernels.PDL_OP_KERNEL_NAMES
        expected = [f"{label} pdl{order}" for order in ("", " release-first") for label in plain]
        assert pdl_labels == (expected if launched_pdl else []), kernel.name
    mma = {k.name for k in op_kernels.MMA_OP_KERNELS}
    assert {k.name for k in op_kernels.linted_op_kernels(capability)} == \
        (mma | set(op_kernels.PDL_OP_KERNEL_NAMES) if pdl else mma)


def _pdl_outcomes(kernel, capability=90, order=WAITS_FIRST):
    """Fake compile outcomes of every launch the rule checks: the registry's instruction
    (or none), and each PDL listing waiting as `order` says."""
    mma = [_mma("wgmma", 16, "bf16")] if kernel.operand_dtype else []
    return {job.key: CompileOutcome(ok=True, instructions=mma,
                                    grid_dependency=order if _is_pdl(job) else None)
            for _label, job in op_kernels.op_kernel_jobs(kernel, capability)}


@pytest.mark.parametrize("kernel_name", op_kernels.PDL_OP_KERNEL_NAMES)
def test_pdl_launches_that_wait_first_pass(kernel_name):
    kernel = registry.entry(kernel_name)
    result, violations = op_kernels.lint_op_kernel(kernel, 90, _pdl_outcomes(kernel))
    assert (result.status, violations) == ("ok", [])
    assert "waits for the previous grid first" in result.summary


@pytest.mark.parametrize("kernel_name", op_kernels.PDL_OP_KERNEL_NAMES)
def test_a_pdl_launch_that_loads_before_its_wait_is_a_violation(kernel_name):
    kernel = registry.entry(kernel_name)
    result, violations = op_kernels.lint_op_kernel(
        kernel, 90, _pdl_outcomes(kernel, order=LOADS_BEFORE_WAIT))
    assert result.status == "violation"
    assert "pdl: 'ld.global.b32 %r1, [%rd1]' before griddepcontrol.wait" in violations[0]


def test_the_rule_flags_a_pdl_launch_of_a_kernel_compiled_without_its_wait():
    """On real PTX: the norm feeding FP8 linears launched with PDL but compiled with USE_PDL
    off (a kernel that touches memory without waiting) is what the rule exists to catch."""
    from det_suite.lint import compile_outcomes

    kernel = registry.entry("bi_rmsnorm_quantize_kernel")
    label, launch = op_kernels.op_kernel_launches(kernel.name, pdl=True)[-1]
    launch.constexprs["USE_PDL"] = False
    (mutant,) = compile_outcomes([specialize(launch, kernel.module, kernel.name, 90)],
                                 workers=1)
    assert mutant.ok, mutant.error
    outcomes = _pdl_outcomes(kernel)
    (pdl_job,) = [job for job_label, job in op_kernels.op_kernel_jobs(kernel, 90)
                  if job_label == label]
    outcomes[pdl_job.key] = mutant
    result, violations = op_kernels.lint_op_kernel(kernel, 90, outcomes)
    assert result.status == "violation"
    assert f"{label}: no griddepcontrol.wait anywhere" in violations[0]
