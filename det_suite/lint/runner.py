"""Running the lint: plan every compile job, compile them all at once (`lint.worker`), then
apply the rules (`lint.rules`) per (table, target) pair and to the fixed kernels."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable

from det_suite.lint.jobs import CompileJob, call_job
from det_suite.lint.op_kernels import lint_op_kernel, linted_op_kernels, op_kernel_jobs
from det_suite.lint.results import LintResult
from det_suite.lint.rules import fixed_kernel_job, lint_fixed_kernel, lint_table_target
from det_suite.lint.targets import OVERRIDE_STAGES, OWN_ROLES, shipped_pairs, table_pair
from det_suite.lint.variants import FIXED_KERNELS, entry_calls
from det_suite.lint.worker import OUTCOMES, compile_all, default_jobs

if TYPE_CHECKING:
    from det_suite.policy import TilePolicy

Pairs = list[tuple["TilePolicy", tuple[tuple[int, str], ...]]]


def plan(policies: Pairs, override_stages: tuple[int, ...], include_fixed: bool
         ) -> tuple[list[CompileJob], list[int]]:
    """All compile jobs the lint needs, before any compilation, and the targets."""
    jobs = []
    caps = set()
    for policy, targets in policies:
        for capability, _role in targets:
            caps.add(capability)
            for entry in policy.all_entries():
                for *_where, call, bound in entry_calls(entry, override_stages):
                    jobs.append(call_job(call, bound, capability))
    if include_fixed:
        for capability in sorted(caps):
            for kernel in FIXED_KERNELS:
                jobs.append(fixed_kernel_job(kernel, capability))
            for kernel in linted_op_kernels(capability):
                jobs.extend(job for _label, job in op_kernel_jobs(kernel, capability))
    return jobs, sorted(caps)


def lint(policies: Pairs, *, override_stages: Iterable[int] = OVERRIDE_STAGES,
         jobs: int | None = None, ptx_dir: str | None = None,
         include_fixed: bool = True) -> LintResult:
    """Lint (policy, ((capability, role), ...)) pairs. Never skips a pair: a target the
    kernel cannot compile for is reported as "unsupported" or as a violation."""
    import triton

    from det_suite.platform.triton_compat import require_supported
    from det_suite.policy import validate_stages

    require_supported()  # one message, not one compile failure per variant
    override_stages = tuple(sorted({validate_stages(s) for s in override_stages}))
    started = time.perf_counter()
    planned, caps = plan(policies, override_stages, include_fixed)
    compiled, hits = compile_all(planned, jobs or default_jobs(), ptx_dir)

    tables, violations, warnings = [], [], []
    for policy, targets in policies:
        for capability, role in targets:
            table, table_violations, table_warnings = lint_table_target(
                policy, capability, role, override_stages, OUTCOMES)
            tables.append(table)
            violations += table_violations
            warnings += table_warnings

    fixed = []
    if include_fixed:
        owned_caps = {cap for _policy, targets in policies for cap, role in targets
                      if role in OWN_ROLES}
        for capability in caps:
            for kernel in FIXED_KERNELS:
                result, kernel_violations = lint_fixed_kernel(
                    kernel, capability, capability in owned_caps, OUTCOMES)
                fixed.append(result)
                violations += kernel_violations
            # One MMA signature across an op's launches; PDL launches wait first.
            for kernel in linted_op_kernels(capability):
                result, kernel_violations = lint_op_kernel(kernel, capability, OUTCOMES)
                fixed.append(result)
                violations += kernel_violations

    return LintResult(triton_version=triton.__version__, override_stages=list(override_stages),
                      tables=tables, fixed_kernels=fixed, violations=violations,
                      warnings=warnings, compiled=compiled, cache_hits=hits,
                      seconds=round(time.perf_counter() - started, 2))


def lint_shipped(families: Iterable[str] | None = None, *, arches: Iterable | None = None,
                 **kwargs) -> LintResult:
    """Lint det-suite's shipped tables (all families, "default" included, by default)."""
    return lint(shipped_pairs(families, arches), **kwargs)


def lint_table(path_or_policy, arches: Iterable | None = None, **kwargs) -> LintResult:
    """Lint a candidate table on `arches` (default: its family's targets)."""
    return lint([table_pair(path_or_policy, arches)], **kwargs)


def instruction_table(families: Iterable[str] | None = None, **kwargs) -> dict:
    """The lint of the shipped tables as plain data, for embedding in other reports.
    `render_markdown(instruction_table())` gives its Markdown form."""
    return lint_shipped(families, **kwargs).to_dict()
