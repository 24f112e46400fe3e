"""The lint's rules, applied to compile outcomes.

Per (target, table entry): every variant that feeds tl.dot must hold MMA instructions of
ONE signature (`ptx_instructions.MmaInstruction.signature`: family mma.sync / wgmma /
tcgen05, K step, operand type, native e4m3 vs FP8 converted to f16); a kernel the registry
says holds no MMA must hold none; a PDL launch must wait (griddepcontrol.wait) before any
global memory access (`ptx_grid_dependency`); every variant must compile. What each
kernel must compile to is `det_suite.kernels.registry`'s `operand_dtype` / `note`.

Per (target, table): the instruction must match the table's `expected_mma` (a violation on
the primary target, a warning elsewhere); "unsupported" is a violation on the table's own
targets (`targets.OWN_ROLES`) and a warning elsewhere.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Mapping

from det_suite.kernels import registry
from det_suite.lint.jobs import call_job, specialize
from det_suite.lint.ptx_grid_dependency import WAIT, GridDependencyOrder
from det_suite.lint.ptx_instructions import MmaInstruction, summarize
from det_suite.lint.ptx_promotion import promotion_problem
from det_suite.lint.results import (EntryResult, FixedKernelResult, TableResult,
                                    VariantResult)
from det_suite.lint.targets import OWN_ROLES, ROLE_PRIMARY, arch_label
from det_suite.lint.variants import entry_calls, fixed_kernel_launch
from det_suite.lint.worker import CompileOutcome

if TYPE_CHECKING:
    from det_suite.policy import TableEntry, TilePolicy

Outcomes = Mapping[str, CompileOutcome]  # job key -> outcome (`worker.OUTCOMES`)


def condense_error(error: str) -> str:
    """One line for a compile error: the Python exception Triton wraps, or ptxas's fatal."""
    wrapped = re.findall(r'\b(\w+(?:Error|Exception))\("(.+?)"\)', error)
    if wrapped:
        return wrapped[-1][1].split(". ")[0][:200]
    lines = [" ".join(line.split()) for line in error.splitlines() if line.strip()]
    fatal = [line for line in lines if "fatal" in line]
    if fatal:
        return fatal[-1][:200]
    return (lines[0] if lines else "compile failed")[:200]


def variant_status(outcome: CompileOutcome) -> tuple[str, str]:
    """(ok | no-mma | error | unsupported, summary) of one listing."""
    if not outcome.ok:
        if outcome.unsupported:
            return "unsupported", condense_error(outcome.error or "")
        return "error", condense_error(outcome.error or "")
    if not outcome.instructions:
        return "no-mma", "no MMA"
    return "ok", summarize(outcome.instructions)


_DISTINGUISHERS = (
    ("BLOCK_M", lambda v: v.block_m),
    ("BLOCK_N", lambda v: v.block_n),
    ("num_warps", lambda v: v.num_warps),
    ("num_stages", lambda v: v.num_stages),
    ("EVEN_K", lambda v: v.even_k),
    ("M", lambda v: v.m),
    ("K", lambda v: v.k),
    ("loads", lambda v: "TMA" if v.tma else "pointer"),
    ("WRITE_PARTIALS", lambda v: v.write_partials),
    ("fix-up", lambda v: v.fixup or "none"),
)


def describe_groups(groups: dict[str, list[VariantResult]]) -> str:
    """'BLOCK_M 16, 32 (mma.sync m16n8k16 f16) vs BLOCK_M 128 (wgmma m64n64k32 e4m3)'."""
    for name, get in _DISTINGUISHERS:
        value_sets = [{get(v) for v in members} for members in groups.values()]
        disjoint = all(a.isdisjoint(b) for i, a in enumerate(value_sets)
                       for b in value_sets[i + 1:])
        if disjoint:
            return " vs ".join(
                f"{name} {', '.join(str(x) for x in sorted(values))} ({summary})"
                for values, summary in zip(value_sets, groups))
    parts = []
    for summary, members in groups.items():
        parts.append(f"[{_some(sorted({v.label for v in members}))}] ({summary})")
    return " vs ".join(parts)


def expected_matches(expected: str, summaries: Iterable[str]) -> bool:
    """Every token of the table's `expected_mma` must match a token of the instruction
    summary; an upper-case letter after m/n/k in a shape is a wildcard ('m64nNk32')."""
    patterns = []
    for token in expected.split():
        pattern = re.escape(token)
        pattern = re.sub(r"([mnk])[A-Z]", r"\1\\d+", pattern)
        patterns.append(re.compile(pattern + r"\Z"))
    for summary in summaries:
        tokens = summary.split()
        if not all(any(p.match(t) for t in tokens) for p in patterns):
            return False
    return True


def _some(labels: list[str], shown: int = 3) -> str:
    more = f"; +{len(labels) - shown} more" if len(labels) > shown else ""
    return "; ".join(labels[:shown]) + more


def _sig_text(signature: tuple, variant: VariantResult) -> str:
    """Summary of the instruction with this signature, from the variant's records."""
    for record in variant.instructions:
        if tuple(record["signature"]) == signature:
            return record["summary"]
    return str(signature)


def _annotated(instruction: MmaInstruction, operand_dtype: str) -> dict:
    data = instruction.to_dict()
    operand = instruction.operand_type
    data["converted_from"] = operand_dtype if operand and operand not in (
        operand_dtype, instruction.kind) else None
    return data


def pdl_order(options, outcome: CompileOutcome) -> GridDependencyOrder | None:
    """Where a launch with programmatic dependent launch (its `launch_pdl` option) waits for
    the previous grid, read from its PTX record; None for a plain launch or a listing
    without the record."""
    if not dict(options).get("launch_pdl") or not outcome.grid_dependency:
        return None
    return GridDependencyOrder(**outcome.grid_dependency)


def unordered_pdl_problem(launches: str) -> str:
    """The violation for PDL launches (`launches`, labelled, with where each waits) that
    touch global memory before they wait."""
    return (f"{launches}: a PDL launch may overlap the previous kernel, so it must wait "
            f"({WAIT}) before any global memory access")


def _variant(index, m_range, source, launch, call, outcome: CompileOutcome
             ) -> tuple[VariantResult, GridDependencyOrder | None]:
    """The variant's result, and where it waits for the previous grid if launched with PDL."""
    kernel = registry.entry(call.kernel)
    status, summary = variant_status(outcome)
    if kernel.operand_dtype is None:  # must hold no MMA
        if status == "no-mma":
            status, summary = "ok", kernel.note
        elif status == "ok":
            status = "unexpected-mma"
    cfg, case = launch.case.config, launch.case
    pdl = bool(dict(call.options).get("launch_pdl"))
    order = pdl_order(call.options, outcome)
    return VariantResult(
        kernel=call.kernel, tile=index, m_range=m_range, m=case.m,
        block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, stages_source=source,
        split_k=cfg.split_k, group_m=cfg.group_m,
        write_partials=cfg.use_workspace, even_k=case.even_k, k=case.k,
        tma=launch.use_tma, fixup=launch.fixup, launch=launch.launch,
        expects_mma=kernel.operand_dtype is not None,
        status=status, summary=summary,
        instructions=[_annotated(i, kernel.operand_dtype or "") for i in outcome.instructions],
        error=outcome.error, ptx_sha256=outcome.ptx_sha256, pdl=pdl,
        pdl_order=order.describe() if order else "",
        prefetch_k=dict(call.constexprs).get("PREFETCH_K", 0),
        swap_ab=dict(call.constexprs).get("SWAP_AB", False)), order


def lint_entry(where: str, entry: "TableEntry", capability: int, override_stages,
               outcomes: Outcomes) -> EntryResult:
    """Check every variant of one table entry on one target."""
    variants: list[VariantResult] = []
    unordered_pdl: list[str] = []
    unprefetched: list[str] = []  # tiles with prefetch_k whose PTX fetches nothing before the wait
    misplaced_promotion: list[str] = []  # warp-specialised listings off the declared interval
    for index, m_range, source, launch, call, bound in entry_calls(entry, override_stages):
        outcome = outcomes[call_job(call, bound, capability).key]
        variant, order = _variant(index, m_range, source, launch, call, outcome)
        variants.append(variant)
        if order is not None and not order.waits_first:
            unordered_pdl.append(f"{variant.label}: {order.describe()}")
        if launch.case.config.warp_specialized and variant.status == "ok":
            problem = promotion_problem(outcome.promotion_groups, launch.case.config.promote_k)
            if problem:
                misplaced_promotion.append(f"{variant.label}: {problem}")
        if variant.prefetch_k and variant.status == "ok" \
                and not (order and order.l2_prefetches_before_wait):
            unprefetched.append(variant.label)

    mma_variants = [v for v in variants if v.expects_mma]
    others = [v for v in variants if not v.expects_mma]
    if {v.status for v in mma_variants} == {"unsupported"}:
        return EntryResult(entry.key, "unsupported",
                           f"kernel does not compile for {arch_label(capability)}: "
                           f"{mma_variants[0].summary}", None, variants)
    problems = []
    failures: dict[str, list[str]] = {}
    for v in variants:
        if v.status in ("error", "unsupported"):
            failures.setdefault(v.summary, []).append(v.label)
    for error, labels in failures.items():
        problems.append(f"{_some(labels)} failed to compile ({len(labels)} of "
                        f"{len(variants)} variants): {error}")
    no_mma = [v.label for v in mma_variants if v.status == "no-mma"]
    if no_mma:
        problems.append(f"{_some(no_mma)}: no MMA instruction in the PTX (tl.dot lowered "
                        "without tensor cores), so the K order cannot be checked")
    if unordered_pdl:
        problems.append(unordered_pdl_problem(_some(unordered_pdl)))
    if unprefetched:
        problems.append(f"{_some(unprefetched)}: the tile sets prefetch_k but its PTX issues no "
                        "prefetch.global.L2 before griddepcontrol.wait")
    if misplaced_promotion:
        problems.append(f"{_some(misplaced_promotion)} (a warp-specialised tile promotes "
                        "by hand, at the family's interval)")
    unexpected = [v for v in others if v.status == "unexpected-mma"]
    if unexpected:
        problems.append(f"{_some([v.label for v in unexpected])}: expected "
                        f"{registry.entry(unexpected[0].kernel).note} but the PTX holds "
                        f"{unexpected[0].summary}")
    groups: dict[str, list[VariantResult]] = {}
    signatures = set()
    for v in mma_variants:
        if v.status == "ok":
            signatures |= v.signatures()
            groups.setdefault(v.summary, []).append(v)
    if len(signatures) > 1:
        # Group by instruction signature (family, K step, operand type) for the message.
        by_sig: dict[frozenset, list[VariantResult]] = {}
        for v in mma_variants:
            if v.status == "ok":
                by_sig.setdefault(frozenset(v.signatures()), []).append(v)
        named = {" + ".join(sorted({_sig_text(s, members[0]) for s in sigs})): members
                 for sigs, members in by_sig.items()}
        problems.insert(0, describe_groups(named))
    if problems:
        message = f"{where} entry {entry.key}: " + "; ".join(problems)
        mix = " vs ".join(groups) if groups else "no instruction"
        return EntryResult(entry.key, "violation", mix, message, variants)
    return EntryResult(entry.key, "ok", " / ".join(groups), None, variants)


def lint_table_target(policy: "TilePolicy", capability: int, role: str, override_stages,
                      outcomes: Outcomes) -> tuple[TableResult, list[str], list[str]]:
    """(result, violations, warnings) of one table on one target."""
    violations, warnings = [], []
    arch = arch_label(capability)
    where = f"{arch} ({policy.family} table)"
    entries = [lint_entry(where, entry, capability, override_stages, outcomes)
               for entry in policy.all_entries()]
    for entry in entries:
        if entry.message:
            violations.append(entry.message)
    summaries = [v.summary for e in entries if e.status == "ok" for v in e.variants
                 if v.expects_mma]
    expected_match = None
    if policy.expected_mma and summaries:
        expected_match = expected_matches(policy.expected_mma, summaries)
        if not expected_match:
            text = (f"{where}: tiles compile to {' / '.join(sorted(set(summaries)))}, "
                    f"not the table's expected_mma '{policy.expected_mma}'")
            (violations if role == ROLE_PRIMARY else warnings).append(text)
    for entry in entries:
        if entry.status != "unsupported":
            continue
        if role in OWN_ROLES:  # the family's own GPU must run its kernel
            entry.status = "violation"
            entry.message = (f"{where} entry {entry.key}: the table's own target "
                             f"cannot compile the kernel: {entry.instruction}")
            violations.append(entry.message)
        else:
            warnings.append(f"{where} entry {entry.key}: not checked, {entry.instruction}")
    table = TableResult(family=policy.family, source=policy.source, capability=capability,
                        arch=arch, role=role, expected_mma=policy.expected_mma,
                        expected_match=expected_match, entries=entries)
    return table, violations, warnings


def fixed_kernel_job(kernel: registry.KernelEntry, capability: int):
    """The compile job of a fixed kernel's representative launch."""
    return specialize(fixed_kernel_launch(kernel.name), kernel.module, kernel.name, capability)


def lint_fixed_kernel(kernel: registry.KernelEntry, capability: int, owned: bool,
                      outcomes: Outcomes) -> tuple[FixedKernelResult, list[str]]:
    """(result, violations) of a kernel that must hold no MMA, on one target; `owned`: a
    table linted here is shipped for this target, so it must compile."""
    outcome = outcomes[fixed_kernel_job(kernel, capability).key]
    status, summary = variant_status(outcome)
    arch = arch_label(capability)
    violations = []
    if status == "no-mma":
        status, summary = "ok", kernel.note
    elif status == "ok":
        status = "violation"
        violations.append(f"{arch} {kernel.name}: expected {kernel.note} but the PTX "
                          f"holds {summary}")
    elif status == "error" or (status == "unsupported" and owned):
        status = "violation" if status == "unsupported" else status
        violations.append(f"{arch} {kernel.name} failed to compile: {summary}")
    return (FixedKernelResult(kernel.name, capability, arch, status, summary, outcome.error),
            violations)
