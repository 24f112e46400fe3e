"""The instruction lint: every tile M may select must compile to ONE MMA instruction along K.

The invariance rule (docs/invariance-rule.md) lets BLOCK_M follow M only among tiles that use the same
MMA instruction along K. This package checks that necessary condition without a GPU: it
cross-compiles, with Triton, every kernel variant a tile table can select to PTX for the
table's GPU family and compares the tensor-core instructions that come out. Within one
(target, table entry) every variant must share one instruction family (mma.sync / wgmma /
tcgen05), one K step and one operand type (native e4m3 vs FP8 converted to f16). It also
checks that a PDL launch waits for the previous grid before it touches global memory, and
that kernels without MMA hold none. `det-suite lint-policy` is its command line.

Modules, in the order the lint uses them:

- `targets`: the compute capabilities each table is linted on and the role each plays
  (primary, also served, fallback, candidate); `parse_arch`; the (policy, targets) pairs.
- `variants`: every kernel variant a table entry can select, as the launches `det_suite.ops`
  describes (`ops.gemm_launch_spec`, `ops.quantize_launch_spec`) bound to stand-ins; the
  fixed kernels (those that must hold no MMA) at a representative launch.
- `standins`: the stand-in tensors those launches are bound to.
- `op_kernels`: the batch-invariant ops' kernels (`ops.bi_launch_spec`): one MMA signature
  across every launch of the BF16 matmul and paged attention; the others hold none; on
  SM90+ every op kernel's PDL launches wait first.
- `jobs`: a bound launch specialised as the Triton runtime would (`CompileJob`).
- `worker`: compile workers (subprocesses without the interpreter), stop-at-PTX, caching.
- `ptx_instructions`, `ptx_grid_dependency`: what a PTX listing holds (pure text).
- `rules`: the checks on the compile outcomes; `results`: what they report;
  `render`: text and Markdown; `runner`: `lint` and its entry points.

One kernel registry: what the lint compiles, and what each kernel must compile to (its
`operand_dtype`, or for a kernel without MMA its `note`), come from
`det_suite.kernels.registry`, the registry `ops` launches from. Adding a kernel is its
file, one registry entry and its launch in `ops.launch_spec`; a GEMM kernel is then linted
wherever `ops.gemm_launch_spec` launches it. A kernel that must hold no MMA and is not
part of the GEMM launch also needs its launch bound in `variants.fixed_kernel_launch`;
tests/unit/lint/test_policy_lint.py fails until it is.
"""

from det_suite.lint.jobs import CompileJob, specialize
from det_suite.lint.ptx_grid_dependency import GridDependencyOrder, grid_dependency_order
from det_suite.lint.ptx_instructions import MmaInstruction, parse_mma_instructions, summarize
from det_suite.lint.render import render_markdown, render_text
from det_suite.lint.results import (EntryResult, FixedKernelResult, LintResult, TableResult,
                                    VariantResult)
from det_suite.lint.rules import describe_groups, expected_matches
from det_suite.lint.runner import instruction_table, lint, lint_shipped, lint_table, plan
from det_suite.lint.standins import (MISALIGNED_BASE_OFFSET, KernelLaunch, StandInTensor,
                                     bind_call, gemm_operands, gemm_tensors, quantize_tensors)
from det_suite.lint.targets import (DEFAULT_TARGETS, FAMILY_TARGETS, OVERRIDE_STAGES,
                                    OWN_ROLES, ROLE_ALSO, ROLE_CANDIDATE, ROLE_FALLBACK,
                                    ROLE_PRIMARY, arch_label, explicit_targets, family_targets,
                                    parse_arch, shipped_pairs, table_pair)
from det_suite.lint.variants import (FIXED_KERNELS, LAUNCH_POINTER_FALLBACK, LAUNCH_SELECTED,
                                     LAUNCH_SINGLE_PASS, MISALIGNED_K_OFFSET, REDUCE_CONFIG,
                                     REPRESENTATIVE_K, REPRESENTATIVE_N, UNBOUNDED_M, GemmCase,
                                     GemmLaunch, fixed_kernel_launch, gemm_launches,
                                     quantize_launch, reduce_launch)
from det_suite.lint.worker import (PTX_CACHE_SUBDIR, CompileOutcome, compile_all,
                                   compile_outcomes, default_jobs)

__all__ = [
    "CompileJob", "CompileOutcome", "DEFAULT_TARGETS", "EntryResult", "FAMILY_TARGETS",
    "FIXED_KERNELS", "FixedKernelResult", "GemmCase", "GemmLaunch", "GridDependencyOrder",
    "KernelLaunch", "LAUNCH_POINTER_FALLBACK", "LAUNCH_SELECTED", "LAUNCH_SINGLE_PASS",
    "LintResult", "MISALIGNED_BASE_OFFSET", "MISALIGNED_K_OFFSET", "MmaInstruction",
    "OVERRIDE_STAGES", "OWN_ROLES", "PTX_CACHE_SUBDIR", "REDUCE_CONFIG", "REPRESENTATIVE_K",
    "REPRESENTATIVE_N", "ROLE_ALSO", "ROLE_CANDIDATE", "ROLE_FALLBACK", "ROLE_PRIMARY",
    "StandInTensor", "TableResult", "UNBOUNDED_M", "VariantResult", "arch_label", "bind_call",
    "compile_all", "compile_outcomes", "default_jobs", "describe_groups", "expected_matches",
    "explicit_targets", "family_targets", "fixed_kernel_launch", "gemm_launches",
    "gemm_operands", "gemm_tensors", "grid_dependency_order", "instruction_table", "lint",
    "lint_shipped", "lint_table", "parse_arch", "parse_mma_instructions", "plan",
    "quantize_launch", "quantize_tensors", "reduce_launch", "render_markdown", "render_text",
    "shipped_pairs", "specialize", "summarize", "table_pair",
]
