"""The batch-invariant ops' kernels (`ops.batch_invariant`) in the instruction lint.

Each op launches one tile for every call, so what must hold is: every launch of a kernel
that feeds tensor cores (the BF16 matmul, paged attention) compiles to ONE MMA signature
(family, K step, operand type) on a target, on the operand format the registry names,
whatever the number of rows, queries or requests; the others hold no MMA. The launches
compiled are `ops.bi_launch_spec`'s descriptions bound to stand-ins, at the call shapes
Triton specialises differently: one row / one request (ints equal to 1 become constants),
a row count that is no multiple of 16, and a large prefill; for attention also a page
size of 1.
"""

from __future__ import annotations

from det_suite.kernels import registry
from det_suite.lint.jobs import specialize
from det_suite.lint.ptx_instructions import summarize
from det_suite.lint.results import FixedKernelResult
from det_suite.lint.rules import condense_error, variant_status
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
# (tokens, requests, page size): decode of one, decode of a batch, a prefill, a ragged
# batch, pages of one token (the page size becomes a constant).
ATTENTION_CALLS = ((1, 1, 16), (4, 4, 16), (4096, 1, 16), (1000, 3, 16), (37, 2, 1))


def _bf16():
    import torch
    return torch.bfloat16


def _matmul(m: int) -> KernelLaunch:
    from det_suite.ops.bi_launch_spec import matmul_launch_spec

    bf16 = _bf16()
    call = matmul_launch_spec(m, VOCAB, HIDDEN, has_bias=False)
    return bind_call(call, dict(x=contiguous(bf16, m, HIDDEN), w=contiguous(bf16, VOCAB, HIDDEN),
                                out=contiguous(bf16, m, VOCAB)))


def _rmsnorm(m: int) -> KernelLaunch:
    from det_suite.ops.bi_launch_spec import rmsnorm_launch_spec

    bf16 = _bf16()
    call = rmsnorm_launch_spec(m, HIDDEN, 1e-6)
    return bind_call(call, dict(x=contiguous(bf16, m, HIDDEN), weight=contiguous(bf16, HIDDEN),
                                out=contiguous(bf16, m, HIDDEN)))


def _log_softmax(m: int) -> KernelLaunch:
    import torch

    from det_suite.ops.bi_launch_spec import log_softmax_launch_spec

    call = log_softmax_launch_spec(m, VOCAB)
    return bind_call(call, dict(x=contiguous(_bf16(), m, VOCAB),
                                out=contiguous(torch.float32, m, VOCAB)))


def _attention(tokens: int, requests: int, page: int) -> KernelLaunch:
    import torch

    from det_suite.ops.bi_launch_spec import attention_launch_spec

    bf16, i32 = _bf16(), torch.int32
    call = attention_launch_spec(tokens, requests, Q_HEADS, KV_HEADS, HEAD_DIM, page,
                                 HEAD_DIM ** -0.5)
    cache = contiguous(bf16, CACHE_BLOCKS, page, KV_HEADS, HEAD_DIM)
    q = contiguous(bf16, tokens, Q_HEADS, HEAD_DIM)
    return bind_call(call, dict(q=q, out=q, k_cache=cache, v_cache=cache,
                                block_tables=contiguous(i32, requests, MAX_BLOCKS),
                                context_lens=contiguous(i32, requests),
                                query_starts=contiguous(i32, requests + 1)))


def op_kernel_launches(name: str) -> list[tuple[str, KernelLaunch]]:
    """(label, launch) for every representative launch of an op kernel."""
    if name == "bi_paged_attention_kernel":
        return [(f"T={t} R={r} page={p}", _attention(t, r, p)) for t, r, p in ATTENTION_CALLS]
    builders = {"bi_matmul_kernel": _matmul, "bi_rmsnorm_kernel": _rmsnorm,
                "bi_log_softmax_kernel": _log_softmax}
    if name not in builders:
        raise KeyError(f"{name!r} is not a batch-invariant op kernel")
    return [(f"M={m}", builders[name](m)) for m in ROW_COUNTS]


# The registry's op kernels that feed tensor cores; those without MMA are fixed kernels
# (`variants.FIXED_KERNELS`) and linted there at `op_kernel_launches(name)[-1]`.
OP_KERNEL_NAMES = ("bi_matmul_kernel", "bi_paged_attention_kernel", "bi_rmsnorm_kernel",
                   "bi_log_softmax_kernel")
MMA_OP_KERNELS: tuple[registry.KernelEntry, ...] = tuple(
    registry.entry(name) for name in OP_KERNEL_NAMES if registry.entry(name).operand_dtype)


def op_kernel_jobs(kernel: registry.KernelEntry, capability: int):
    """(label, compile job) for every launch of an MMA op kernel on one target."""
    return [(label, specialize(launch, kernel.module, kernel.name, capability))
            for label, launch in op_kernel_launches(kernel.name)]


def lint_op_kernel(kernel: registry.KernelEntry, capability: int, outcomes
                   ) -> tuple[FixedKernelResult, list[str]]:
    """(result, violations): every launch compiles, holds MMA, one signature, on the
    registry's operand format."""
    arch = arch_label(capability)
    signatures, summaries, problems = set(), {}, []
    error = None
    for label, job in op_kernel_jobs(kernel, capability):
        outcome = outcomes[job.key]
        status, summary = variant_status(outcome)
        if status in ("error", "unsupported"):
            problems.append(f"{label} failed to compile: {summary}")
            error = error or outcome.error
        elif status == "no-mma":
            problems.append(f"{label}: no MMA instruction (tl.dot lowered without tensor cores)")
        else:
            signatures |= {i.signature for i in outcome.instructions}
            summaries.setdefault(summarize(outcome.instructions), []).append(label)
            wrong = {i.operand_type for i in outcome.instructions} - {kernel.operand_dtype}
            if wrong:
                problems.append(f"{label}: operands {', '.join(sorted(map(str, wrong)))}, "
                                f"not {kernel.operand_dtype}")
    if len(signatures) > 1:
        problems.insert(0, "launches mix MMA instructions: " + " vs ".join(
            f"{', '.join(labels)} ({summary})" for summary, labels in summaries.items()))
    summary = " / ".join(summaries) or "no instruction"
    if problems:
        message = f"{arch} {kernel.name}: " + "; ".join(problems)
        return (FixedKernelResult(kernel.name, capability, arch, "violation",
                                  condense_error(message) if error else summary, error),
                [message])
    return FixedKernelResult(kernel.name, capability, arch, "ok", summary), []
