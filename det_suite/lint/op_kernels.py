"""The batch-invariant ops' kernels (`ops.batch_invariant`) in the instruction lint.

Each op launches one tile for every call, so what must hold is: every launch of a kernel
that feeds tensor cores (the BF16 matmul, paged attention) compiles to ONE MMA signature
(family, K step, operand type) on a target, on the operand format the registry names,
whatever the number of rows, queries or requests; the others hold no MMA. The launches
compiled are `ops.bi_launch_spec`'s descriptions bound to stand-ins, at the call shapes
Triton specialises differently: one row / one request (ints equal to 1 become constants),
a row count that is no multiple of 16, and a large prefill; for attention also a page
size of 1, and each call again returning the o projection's FP8 input (`out_scale`: the
epilogue quantizes). Attention has two launch shapes (its tile kernel; the split partial
and combine kernels for decode calls), each linted at the calls that take it, and the
split partial kernel must hold the tile kernel's signature (`SAME_MMA_AS`): a decode row
has a prefill row's bits only if one instruction computes both.

On targets with programmatic dependent launch (SM90+, where `ops.launch.programmatic_launch`
turns it on) every op kernel but attention's (launched plain) is also compiled as launched
with PDL, and such a launch must
wait for the previous grid (griddepcontrol.wait) before any global memory access: it may
start while that grid still writes its input. Kernels without MMA are linted plain once,
as fixed kernels (`variants.FIXED_KERNELS`); here they are linted at their PDL launches.
"""

from __future__ import annotations

from det_suite.kernels import registry
from det_suite.kernels.grid_dependency import PDL_MIN_CAPABILITY, RELEASE_FIRST
from det_suite.lint.jobs import specialize
from det_suite.lint.ptx_instructions import summarize
from det_suite.lint.results import FixedKernelResult
from det_suite.lint.rules import (condense_error, pdl_order, unordered_pdl_problem,
                                  variant_status)
from det_suite.lint.standins import KernelLaunch, bind_call, contiguous
from det_suite.lint.targets import arch_label
from det_suite.lint.variants import REPRESENTATIVE_K, REPRESENTATIVE_N

# Representative fixed dimensions: the FP8 lint's (no model's shapes here).
HIDDEN = REPRESENTATIVE_K
VOCAB = REPRESENTATIVE_N
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
CACHE_BLOCKS, MAX_BLOCKS = 1024, 256
# Row counts: decode (Triton's M == 1 constant), a ragged count, a large prefill.
ROW_COUNTS = (1, 37, 4096)
# paged_attention calls as (tokens, requests, page size). Decode calls (T == R) launch the
# split shape (partial and combine kernels): decode of one, of a batch, with pages of one
# token. The others the tile kernel: a prefill, a ragged batch, pages of one token (the
# page size becomes a constant). Each kernel is linted at the calls that launch it.
ATTENTION_CALLS = ((1, 1, 16), (4, 4, 16), (8, 8, 1), (4096, 1, 16), (1000, 3, 16),
                   (37, 2, 1))
ATTENTION_KERNELS = ("bi_paged_attention_kernel", "bi_paged_attention_split_kernel",
                     "bi_paged_attention_combine_kernel")


def _bf16():
    import torch
    return torch.bfloat16


def _matmul(m: int, pdl: bool | int = False) -> KernelLaunch:
    from det_suite.ops.bi_launch_spec import matmul_launch_spec

    bf16 = _bf16()
    call = matmul_launch_spec(m, VOCAB, HIDDEN, has_bias=False, pdl=pdl)
    return bind_call(call, dict(x=contiguous(bf16, m, HIDDEN), w=contiguous(bf16, VOCAB, HIDDEN),
                                out=contiguous(bf16, m, VOCAB)))


def _rmsnorm(m: int, pdl: bool | int = False) -> KernelLaunch:
    from det_suite.ops.bi_launch_spec import rmsnorm_launch_spec

    bf16 = _bf16()
    call = rmsnorm_launch_spec(m, HIDDEN, 1e-6, pdl=pdl)
    return bind_call(call, dict(x=contiguous(bf16, m, HIDDEN), weight=contiguous(bf16, HIDDEN),
                                out=contiguous(bf16, m, HIDDEN)))


def _log_softmax(m: int, pdl: bool | int = False) -> dict[str, KernelLaunch]:
    """Both launches of one log_softmax call, by kernel."""
    import torch

    from det_suite.ops.bi_launch_spec import log_softmax_launch_spec, log_softmax_stats_shape

    tensors = dict(x=contiguous(_bf16(), m, VOCAB),
                   stats=contiguous(torch.float32, *log_softmax_stats_shape(m, VOCAB)),
                   out=contiguous(torch.float32, m, VOCAB))
    return {call.kernel: bind_call(call, tensors)
            for call in log_softmax_launch_spec(m, VOCAB, pdl=pdl)}


LOG_SOFTMAX_KERNELS = ("bi_log_softmax_partials_kernel", "bi_log_softmax_kernel")


def _log_softmax_launch(kernel: str):
    """A builder of `kernel`'s launch in a log_softmax call of m rows."""
    return lambda m, pdl=False: _log_softmax(m, pdl)[kernel]


def _attention(tokens: int, requests: int, page: int, quantize_out: bool = False
               ) -> dict[str, KernelLaunch]:
    """Every launch of one paged_attention call, by kernel; with quantize_out, the call
    that returns the o projection's FP8 input (out_scale given)."""
    import torch

    from det_suite.ops.bi_launch_spec import (attention_launch_spec,
                                              attention_split_launch_spec, attention_splits_kv,
                                              attention_workspace_shapes)

    bf16, i32 = _bf16(), torch.int32
    cache = contiguous(bf16, CACHE_BLOCKS, page, KV_HEADS, HEAD_DIM)
    q = contiguous(bf16, tokens, Q_HEADS, HEAD_DIM)
    out = contiguous(torch.float8_e4m3fn, tokens, Q_HEADS, HEAD_DIM) if quantize_out else q
    tensors = dict(q=q, out=out, out_scale=contiguous(torch.float32, 1), k_cache=cache,
                   v_cache=cache, block_tables=contiguous(i32, requests, MAX_BLOCKS),
                   context_lens=contiguous(i32, requests),
                   query_starts=contiguous(i32, requests + 1))
    scale = HEAD_DIM ** -0.5
    if attention_splits_kv(tokens, requests):
        calls = attention_split_launch_spec(tokens, requests, Q_HEADS, KV_HEADS, HEAD_DIM,
                                            page, MAX_BLOCKS, scale, quantize_out=quantize_out)
        for role, shape in attention_workspace_shapes(tokens, Q_HEADS, HEAD_DIM, page,
                                                      MAX_BLOCKS).items():
            tensors[role] = contiguous(torch.float32, *shape)
    else:
        calls = (attention_launch_spec(tokens, requests, Q_HEADS, KV_HEADS, HEAD_DIM, page,
                                       scale, quantize_out=quantize_out),)
    return {call.kernel: bind_call(call, tensors) for call in calls}


def _qk_norm_rope(tokens: int, pdl: bool | int = False) -> KernelLaunch:
    import torch

    from det_suite.ops.bi_launch_spec import qk_norm_rope_launch_spec

    bf16, page = _bf16(), 16
    call = qk_norm_rope_launch_spec(tokens, Q_HEADS, KV_HEADS, HEAD_DIM, CACHE_BLOCKS * page,
                                    1e-6, pdl=pdl)
    q = contiguous(bf16, tokens, Q_HEADS, HEAD_DIM)
    kv = contiguous(bf16, tokens, KV_HEADS, HEAD_DIM)
    rope = contiguous(bf16, tokens, HEAD_DIM)
    weight = contiguous(bf16, HEAD_DIM)
    cache = contiguous(bf16, CACHE_BLOCKS, page, KV_HEADS, HEAD_DIM)
    return bind_call(call, dict(q=q, k=kv, v=kv, q_weight=weight, k_weight=weight, cos=rope,
                                sin=rope, k_cache=cache, v_cache=cache, q_out=q,
                                slot_mapping=contiguous(torch.int64, tokens)))


def _rmsnorm_quantize(m: int, residual: bool = False, pdl: bool | int = False) -> KernelLaunch:
    import torch

    from det_suite.ops.bi_launch_spec import MAX_QUANTIZED_OUTPUTS, rmsnorm_quantize_launch_spec

    fp8, f32 = torch.float8_e4m3fn, torch.float32
    call = rmsnorm_quantize_launch_spec(m, HIDDEN, 1e-6, MAX_QUANTIZED_OUTPUTS,
                                        residual=residual, pdl=pdl)
    tensors = dict(x=contiguous(_bf16(), m, HIDDEN), weight=contiguous(_bf16(), HIDDEN))
    if residual:
        tensors.update(delta=contiguous(_bf16(), m, HIDDEN), summed=contiguous(_bf16(), m, HIDDEN))
    for i in range(MAX_QUANTIZED_OUTPUTS):
        tensors[f"q{i}"] = contiguous(fp8, m, HIDDEN)
        tensors[f"scale{i}"] = contiguous(f32, 1)
    return bind_call(call, tensors)


def _mul_quantize(m: int, silu: bool = False, pdl: bool | int = False) -> KernelLaunch:
    """With silu, the model's launch: silu(gate) * up, gate and up the two column halves
    of one (m, 2 * HIDDEN) gate|up GEMM output."""
    from dataclasses import replace

    import torch

    from det_suite.ops.bi_launch_spec import mul_quantize_launch_spec

    call = mul_quantize_launch_spec(m, HIDDEN, silu_a=silu, pdl=pdl)
    a = b = contiguous(_bf16(), m, HIDDEN)
    if silu:
        a = replace(contiguous(_bf16(), m, 2 * HIDDEN), shape=(m, HIDDEN))
        b = replace(a, address=a.address + HIDDEN * _bf16().itemsize)
    return bind_call(call, dict(a=a, b=b, q=contiguous(torch.float8_e4m3fn, m, HIDDEN),
                                scale=contiguous(torch.float32, 1)))


def op_kernel_launches(name: str, *, pdl: bool | int = False) -> list[tuple[str, KernelLaunch]]:
    """(label, launch) for every representative launch of an op kernel; with `pdl` the
    same launches with programmatic dependent launch (labels end in ' pdl', or
    ' pdl release-first' for `RELEASE_FIRST`, the DET_SUITE_PDL=early order)."""
    tag = (" pdl release-first" if pdl == RELEASE_FIRST else " pdl") if pdl else ""
    if name in ATTENTION_KERNELS:  # each call as it is and returning FP8 (the model's)
        if pdl:
            return []   # paged_attention launches plain
        calls = [(f"T={t} R={r} page={p}{' fp8-out' if fp8 else ''}",
                  _attention(t, r, p, fp8))
                 for fp8 in (False, True) for t, r, p in ATTENTION_CALLS]
        return [(label, launches[name]) for label, launches in calls if name in launches]
    builders = {"bi_matmul_kernel": _matmul, "bi_rmsnorm_kernel": _rmsnorm,
                **{kernel: _log_softmax_launch(kernel) for kernel in LOG_SOFTMAX_KERNELS},
                "bi_qk_norm_rope_kernel": _qk_norm_rope,
                "bi_rmsnorm_quantize_kernel": _rmsnorm_quantize,
                "bi_mul_quantize_kernel": _mul_quantize}
    if name not in builders:
        raise KeyError(f"{name!r} is not a batch-invariant op kernel")
    launches = [(f"M={m}{tag}", builders[name](m, pdl=pdl)) for m in ROW_COUNTS]
    if name == "bi_rmsnorm_quantize_kernel":  # and with the residual add, which most calls take
        launches += [(f"M={m} residual{tag}", _rmsnorm_quantize(m, residual=True, pdl=pdl))
                     for m in ROW_COUNTS]
    if name == "bi_mul_quantize_kernel":  # and with silu, the model's: last, so the one linted
        launches += [(f"M={m} silu{tag}", _mul_quantize(m, silu=True, pdl=pdl))
                     for m in ROW_COUNTS]
    return launches


OP_KERNEL_NAMES = ("bi_matmul_kernel", "bi_paged_attention_kernel", "bi_rmsnorm_kernel",
                   "bi_log_softmax_partials_kernel", "bi_log_softmax_kernel",
                   "bi_qk_norm_rope_kernel",
                   "bi_rmsnorm_quantize_kernel", "bi_mul_quantize_kernel",
                   "bi_paged_attention_split_kernel", "bi_paged_attention_combine_kernel")
OP_KERNELS: tuple[registry.KernelEntry, ...] = tuple(map(registry.entry, OP_KERNEL_NAMES))
# The op kernels that feed tensor cores, linted here at every launch; those without MMA are
# fixed kernels (`variants.FIXED_KERNELS`), linted there at `op_kernel_launches(name)[-1]`
# and here at their PDL launches only.
MMA_OP_KERNELS: tuple[registry.KernelEntry, ...] = tuple(
    kernel for kernel in OP_KERNELS if kernel.operand_dtype)


# MMA kernels whose rows must have another kernel's bits, so its MMA instruction too: the
# split shape's partial kernel reduces a decode query exactly as the tile kernel reduces it
# in a prefill. Its lint compiles both kernels' launches and wants one signature across.
SAME_MMA_AS = {"bi_paged_attention_split_kernel": "bi_paged_attention_kernel"}


def launches_pdl(capability: int) -> bool:
    """Whether the ops launch with programmatic dependent launch on this target."""
    return capability >= PDL_MIN_CAPABILITY


# The op kernels launched with PDL where the target has it: all but attention's.
PDL_OP_KERNEL_NAMES = tuple(name for name in OP_KERNEL_NAMES if name not in ATTENTION_KERNELS)


def linted_op_kernels(capability: int) -> tuple[registry.KernelEntry, ...]:
    """The op kernels `lint_op_kernel` checks on a target: those with MMA everywhere, the
    others where they are launched with PDL."""
    if not launches_pdl(capability):
        return MMA_OP_KERNELS
    return tuple(k for k in OP_KERNELS if k.operand_dtype or k.name in PDL_OP_KERNEL_NAMES)


def op_kernel_jobs(kernel: registry.KernelEntry, capability: int):
    """(label, compile job) for the launches the op-kernel rule checks on one target: every
    launch of an MMA op kernel, the PDL launches of every op kernel where the ops use PDL,
    then the jobs of the kernel whose MMA it must share (labelled with that kernel's name)."""
    launches = op_kernel_launches(kernel.name) if kernel.operand_dtype else []
    if launches_pdl(capability):
        launches += op_kernel_launches(kernel.name, pdl=True)
        launches += op_kernel_launches(kernel.name, pdl=RELEASE_FIRST)
    jobs = [(label, specialize(launch, kernel.module, kernel.name, capability))
            for label, launch in launches]
    partner = SAME_MMA_AS.get(kernel.name)
    if partner:
        jobs += [(f"{partner} {label}", job)
                 for label, job in op_kernel_jobs(registry.entry(partner), capability)]
    return jobs


def lint_op_kernel(kernel: registry.KernelEntry, capability: int, outcomes
                   ) -> tuple[FixedKernelResult, list[str]]:
    """(result, violations): every launch compiles; a kernel feeding tensor cores holds
    MMA, one signature, on the registry's operand format, and the others hold none; a PDL
    launch waits for the previous grid before any global access. A launch the target
    cannot compile for lack of a format (an FP8 output before sm_89: no FP8 linear runs
    there to take it) is reported as unsupported and not linted; the kernel's other
    launches still must compile."""
    arch = arch_label(capability)
    signatures, summaries, problems, unsupported = set(), {}, [], []
    unordered, waits_first = [], 0
    compiled, error = 0, None
    for label, job in op_kernel_jobs(kernel, capability):
        outcome = outcomes[job.key]
        status, summary = variant_status(outcome)
        if status == "unsupported":
            unsupported.append(label)
            continue
        if status == "error":
            problems.append(f"{label} failed to compile: {summary}")
            error = error or outcome.error
            continue
        compiled += 1
        if kernel.operand_dtype is None:
            if status == "ok":
                problems.append(f"{label}: expected {kernel.note} but the PTX holds {summary}")
        elif status == "no-mma":
            problems.append(f"{label}: no MMA instruction (tl.dot lowered without tensor cores)")
        else:
            signatures |= {i.signature for i in outcome.instructions}
            summaries.setdefault(summarize(outcome.instructions), []).append(label)
            wrong = {i.operand_type for i in outcome.instructions} - {kernel.operand_dtype}
            if wrong:
                problems.append(f"{label}: operands {', '.join(sorted(map(str, wrong)))}, "
                                f"not {kernel.operand_dtype}")
        order = pdl_order(job.options, outcome)
        if order is not None and not order.waits_first:
            unordered.append(f"{label}: {order.describe()}")
        elif order is not None:
            waits_first += 1
    if len(signatures) > 1:
        problems.insert(0, "launches mix MMA instructions: " + " vs ".join(
            f"{', '.join(labels)} ({summary})" for summary, labels in summaries.items()))
    if unordered:
        problems.append(unordered_pdl_problem("; ".join(unordered)))
    if unsupported and not compiled:
        problems.append(f"no launch compiles here ({', '.join(unsupported)}: unsupported)")
    summary = (" / ".join(summaries) or "no instruction") if kernel.operand_dtype \
        else kernel.note
    if waits_first:
        summary += f"; waits for the previous grid first ({waits_first} PDL launches)"
    if unsupported:
        summary += f" ({len(unsupported)} launches unsupported here)"
    if problems:
        message = f"{arch} {kernel.name}: " + "; ".join(problems)
        return (FixedKernelResult(kernel.name, capability, arch, "violation",
                                  condense_error(message) if error else summary, error),
                [message])
    return FixedKernelResult(kernel.name, capability, arch, "ok", summary), []
