"""Bit-exact comparisons and the per-case routines that make them.

One comparison is one `torch.equal` of two output tensors; every one is recorded, equal or
not, so a report can say exactly how much was checked. Kinds:

- suffix:       the last m rows computed alone vs the same rows inside the m_full-row call
                (what a prefix-cache hit does: prefill only the uncached suffix)
- composition:  a few target rows computed alone vs placed among other rows (first, middle,
                last) in batches of several sizes
- graph:        a CUDA Graph captured at a padded batch size, replayed on fresh rows, vs
                eager on the real rows (det_suite/invariance/graph.py)
- pipeline_ab:  the same call on two pipeline depths (arms) of one tile table

Each comparison records `m`, the row count that varies (the suffix length; the size of the
batch the target rows were placed in; the real rows of a graph replay; the rows of an A/B
call) and `ref_m`, that of the other side (m_full; the target rows alone; the captured
size B; the same). Reports class comparisons by `m`.
NaN never equals itself, so a NaN output counts as a mismatch (the inputs hold none).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from det_suite.invariance.cases import (Case, Plan, Problem, apply_layout, make_rows,
                                        take_rows)
from det_suite.invariance.providers import Provider

KINDS = ("suffix", "composition", "graph", "pipeline_ab")


@dataclass(frozen=True)
class Comparison:
    provider: str
    case: str
    shape: str
    kind: str
    m: int
    ref_m: int
    equal: bool
    mismatching_rows: int = 0
    max_abs_diff: float = 0.0
    reference: str = ""   # pipeline_ab: the arm compared against; graph: "eager"
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ProviderError:
    provider: str
    case: str
    kind: str
    message: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Recorder:
    """Collects every comparison and every provider failure of a run."""

    comparisons: list[Comparison] = field(default_factory=list)
    errors: list[ProviderError] = field(default_factory=list)

    def add(self, comparison: Comparison) -> Comparison:
        self.comparisons.append(comparison)
        return comparison

    def error(self, provider: str, case: str, kind: str, exc: BaseException) -> None:
        self.errors.append(ProviderError(provider, case, kind,
                                         f"{type(exc).__name__}: {exc}"))

    def count(self, provider: str | None = None, kind: str | None = None) -> int:
        return sum(1 for c in self.comparisons
                   if (provider is None or c.provider == provider)
                   and (kind is None or c.kind == kind))

    def mismatches(self) -> list[Comparison]:
        return [c for c in self.comparisons if not c.equal]


def diff_stats(test: torch.Tensor, ref: torch.Tensor) -> tuple[int, float]:
    """(rows with any differing element, max |test - ref|) of two (..., rows, N) tensors."""
    a = test.reshape(-1, test.shape[-1])
    b = ref.reshape(-1, ref.shape[-1])
    differs = (a != b) | (torch.isnan(a) != torch.isnan(b))
    diff = (a.float() - b.float()).abs()
    # A NaN on one side only is an infinite difference; NaN on both sides is no number.
    diff = torch.where(torch.isnan(a) & torch.isnan(b), torch.zeros_like(diff),
                       torch.nan_to_num(diff, nan=float("inf")))
    return int(differs.any(dim=1).sum().item()), float(diff.max().item()) if diff.numel() else 0.0


def compare(recorder: Recorder, *, provider: str, case: Case, kind: str, test: torch.Tensor,
            ref: torch.Tensor, m: int, ref_m: int, reference: str = "",
            detail: str = "") -> Comparison:
    """One bit-exact comparison, recorded. Shapes and dtypes must agree (a mismatch there is
    a provider bug, reported as an unequal comparison with the reason)."""
    if test.shape != ref.shape or test.dtype != ref.dtype:
        return recorder.add(Comparison(
            provider, case.id, case.shape.name, kind, m, ref_m, False, m, float("inf"),
            reference, f"shape/dtype {tuple(test.shape)} {test.dtype} vs "
                       f"{tuple(ref.shape)} {ref.dtype}"))
    if torch.equal(test, ref):
        return recorder.add(Comparison(provider, case.id, case.shape.name, kind, m, ref_m,
                                       True, reference=reference, detail=detail))
    rows, max_diff = diff_stats(test, ref)
    return recorder.add(Comparison(provider, case.id, case.shape.name, kind, m, ref_m, False,
                                   rows, max_diff, reference, detail))


class _Arms:
    """The A/B arms of one group, calling each on the same input and comparing every
    arm's output with arm A's. An arm that raises is recorded and dropped for the case."""

    def __init__(self, arms: list[Provider], case: Case, problem: Problem, rec: Recorder):
        self.arms = list(arms)
        self.case, self.problem, self.rec = case, problem, rec

    def __bool__(self) -> bool:
        return bool(self.arms)

    def call(self, x: torch.Tensor, kind: str) -> dict[str, torch.Tensor]:
        outs = {}
        for arm in list(self.arms):
            try:
                outs[arm.name] = arm(x, *self.problem.args())
            except Exception as exc:  # a provider failure is a result, not a crash
                self.rec.error(arm.name, self.case.id, kind, exc)
                self.arms.remove(arm)
        if len(self.arms) > 1 and self.arms[0].name in outs:
            a = self.arms[0].name
            for arm in self.arms[1:]:
                if arm.name in outs:
                    rows = x.shape[-2]
                    compare(self.rec, provider=arm.name, case=self.case, kind="pipeline_ab",
                            test=outs[arm.name], ref=outs[a], m=rows, ref_m=rows,
                            reference=a)
        return outs


def run_suffix_and_composition(arms: list[Provider], case: Case, problem: Problem,
                               plan: Plan, rec: Recorder, device) -> None:
    """Cached-suffix and batch-composition comparisons for one group of A/B arms (the A/B
    comparisons come with every call)."""
    group = _Arms(arms, case, problem, rec)
    x_full = apply_layout(make_rows(problem, case, plan.m_full, "full", device), case.layout)
    full = group.call(x_full, "suffix")
    for m in plan.suffix_ms:
        if not group:
            return
        outs = group.call(take_rows(x_full, plan.m_full - m, plan.m_full), "suffix")
        for name, y in outs.items():
            if name in full:
                compare(rec, provider=name, case=case, kind="suffix", test=y,
                        ref=take_rows(full[name], plan.m_full - m, plan.m_full),
                        m=m, ref_m=plan.m_full)
    del full
    if not plan.placements or not group:
        return
    t = plan.target_rows
    target = make_rows(problem, case, t, "target", device)
    alone = group.call(apply_layout(target, case.layout), "composition")
    for index, size in enumerate(plan.placements):
        # Target first, in the middle, last, in turn; fresh neighbours for every batch.
        before = (0, (size - t) // 2, size - t)[index % 3]
        neighbours = make_rows(problem, case, size - t, f"neighbours{index}", device)
        batch = torch.cat((neighbours[:before], target, neighbours[before:]))
        outs = group.call(apply_layout(batch, case.layout), "composition")
        for name, y in outs.items():
            if name in alone:
                compare(rec, provider=name, case=case, kind="composition",
                        test=take_rows(y, before, before + t), ref=alone[name], m=size,
                        ref_m=t, detail=f"target rows at {before}..{before + t - 1}")
