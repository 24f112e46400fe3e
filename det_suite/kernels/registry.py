"""Every Triton kernel det-suite launches, by name: where it is defined and what its PTX
must hold. The launcher (`det_suite.ops`) looks kernels up here and the instruction lint
(`det_suite.lint`) compiles them from here, so a new kernel is one file plus one entry.

Import-light on purpose (no torch, no kernel module until `load`): the lint's compile
workers read it before they decide whether kernels may be imported.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelEntry:
    name: str                   # the @triton.jit function's name, also its attribute name
    module: str                 # the module that defines it
    operand_dtype: str | None   # the format it feeds tl.dot; None: its PTX must hold no MMA
    note: str = ""              # for a no-MMA kernel: what it computes instead
    gemm: bool = True           # launched by the GEMM launch description (ops.launch_spec)

    def load(self):
        """The JIT function (an InterpretedFunction under TRITON_INTERPRET)."""
        return getattr(importlib.import_module(self.module), self.name)


KERNELS: dict[str, KernelEntry] = {entry.name: entry for entry in (
    KernelEntry("fp8_scaled_mm_kernel", "det_suite.kernels.fp8_scaled_mm", "e4m3"),
    KernelEntry("fp8_scaled_mm_tma_kernel", "det_suite.kernels.fp8_scaled_mm_tma", "e4m3"),
    # Gluon (SM90 only): a `warp_specialized` tile's kernel, the TMA tile's schedule.
    KernelEntry("fp8_scaled_mm_pingpong_kernel", "det_suite.kernels.fp8_scaled_mm_pingpong",
                "e4m3"),
    KernelEntry("fp8_splitk_reduce_kernel", "det_suite.kernels.fp8_splitk_reduce", None,
                "no MMA (ordered fp32 sum)"),
    KernelEntry("fp8_quantize_kernel", "det_suite.kernels.fp8_quantize", None,
                "no MMA (elementwise)", gemm=False),
    # The batch-invariant ops of a model's forward (ops.batch_invariant), one tile each.
    KernelEntry("bi_matmul_kernel", "det_suite.kernels.bi_matmul", "bf16", gemm=False),
    KernelEntry("bi_paged_attention_kernel", "det_suite.kernels.bi_attention", "bf16",
                gemm=False),
    KernelEntry("bi_paged_attention_split_kernel", "det_suite.kernels.bi_attention_split",
                "bf16", gemm=False),
    KernelEntry("bi_paged_attention_combine_kernel", "det_suite.kernels.bi_attention_combine",
                None, "no MMA (ordered fp32 merge of attention segments, optional FP8 output)", gemm=False),
    KernelEntry("bi_rmsnorm_kernel", "det_suite.kernels.bi_rmsnorm", None,
                "no MMA (per-row fp32 sum)", gemm=False),
    KernelEntry("bi_log_softmax_partials_kernel", "det_suite.kernels.bi_log_softmax_partials",
                None, "no MMA (per-slice fp32 max and sum)", gemm=False),
    KernelEntry("bi_log_softmax_kernel", "det_suite.kernels.bi_log_softmax", None,
                "no MMA (fp32 merge of the row's slices, elementwise output)", gemm=False),
    KernelEntry("bi_rmsnorm_quantize_kernel", "det_suite.kernels.bi_rmsnorm_quantize", None,
                "no MMA (per-row fp32 sum, elementwise quantization)", gemm=False),
    KernelEntry("bi_mul_quantize_kernel", "det_suite.kernels.bi_mul_quantize", None,
                "no MMA (elementwise)", gemm=False),
    KernelEntry("bi_qk_norm_rope_kernel", "det_suite.kernels.bi_qk_norm_rope", None,
                "no MMA (per-row fp32 sum, elementwise RoPE, KV-cache copy)", gemm=False),
)}

GEMM_KERNELS: tuple[str, ...] = tuple(name for name, e in KERNELS.items() if e.gemm)


def entry(name: str) -> KernelEntry:
    try:
        return KERNELS[name]
    except KeyError:
        raise KeyError(f"kernel {name!r} is not in det_suite.kernels.registry.KERNELS; "
                       f"known: {', '.join(KERNELS)}") from None


_loaded: dict[str, object] = {}


def kernel(name: str):
    """The JIT function registered as `name` (looked up once: it is on every launch's path)."""
    fn = _loaded.get(name)
    if fn is None:
        fn = _loaded[name] = entry(name).load()
    return fn
