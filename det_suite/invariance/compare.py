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

The same comparisons prove one tile-table entry at the GEMM level (`prove_entry`, what
`det-suite tune` stores an entry after): prefix and suffix row subsets (`subset_rows`) of
calls at several row counts, each config M selects and every config forced, against one
big call. `SplitKByM` is its counterpart: an entry made to choose split-K by M, which the
same comparisons must reject.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterable, Protocol, Sequence

import torch

from det_suite.invariance.cases import (Case, GemmOperands, Plan, Problem, apply_layout,
                                        make_rows, take_rows)
from det_suite.invariance.providers import Provider
from det_suite.policy import LaunchConfig

KINDS = ("suffix", "composition", "graph", "pipeline_ab")
# Row subsets of an m_full-row call that m rows computed alone must reproduce: the first m,
# or the last m (what a prefix-cache hit computes).
ROW_SUBSETS = ("prefix", "suffix")


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


def comparison(*, provider: str, case: str, shape: str, kind: str, test: torch.Tensor,
               ref: torch.Tensor, m: int, ref_m: int, reference: str = "",
               detail: str = "") -> Comparison:
    """One bit-exact comparison of two outputs. Shapes and dtypes must agree (a mismatch
    there is a provider bug, reported as an unequal comparison with the reason)."""
    if test.shape != ref.shape or test.dtype != ref.dtype:
        return Comparison(provider, case, shape, kind, m, ref_m, False, m, float("inf"),
                          reference, f"shape/dtype {tuple(test.shape)} {test.dtype} vs "
                                     f"{tuple(ref.shape)} {ref.dtype}")
    if torch.equal(test, ref):
        return Comparison(provider, case, shape, kind, m, ref_m, True, reference=reference,
                          detail=detail)
    rows, max_diff = diff_stats(test, ref)
    return Comparison(provider, case, shape, kind, m, ref_m, False, rows, max_diff, reference,
                      detail)


def compare(recorder: Recorder, *, provider: str, case: Case, kind: str, test: torch.Tensor,
            ref: torch.Tensor, m: int, ref_m: int, reference: str = "",
            detail: str = "") -> Comparison:
    """One bit-exact comparison (`comparison`) of a case, recorded."""
    return recorder.add(comparison(provider=provider, case=case.id, shape=case.shape.name,
                                   kind=kind, test=test, ref=ref, m=m, ref_m=ref_m,
                                   reference=reference, detail=detail))


def diff_text(test: torch.Tensor, ref: torch.Tensor) -> str:
    differing = int((test != ref).sum())
    max_abs = float((test.float() - ref.float()).abs().max())
    return f"{differing} of {ref.numel()} outputs differ (max |diff| {max_abs:.4g})"


def subset_rows(subset: str, m: int, m_full: int) -> tuple[int, int]:
    """(start, stop) of the m rows a subset (ROW_SUBSETS) names in an m_full-row call."""
    if not 1 <= m <= m_full:
        raise ValueError(f"{m} rows are not a subset of {m_full}")
    if subset == "prefix":
        return 0, m
    if subset == "suffix":
        return m_full - m, m_full
    raise ValueError(f"subset {subset!r} not in {ROW_SUBSETS}")


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
        start, stop = subset_rows("suffix", m, plan.m_full)
        outs = group.call(take_rows(x_full, start, stop), "suffix")
        for name, y in outs.items():
            if name in full:
                compare(rec, provider=name, case=case, kind="suffix", test=y,
                        ref=take_rows(full[name], start, stop), m=m, ref_m=plan.m_full)
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


# ---------------------------------------------------------------- one tile-table entry

class EntryLike(Protocol):
    """What `prove_entry` proves: a policy.TableEntry, or anything that selects like one."""

    def select(self, m: int) -> LaunchConfig: ...
    def variants(self) -> tuple[LaunchConfig, ...]: ...


@dataclass(frozen=True)
class CheckFailure:
    kind: str           # "accuracy" | "invariance" | "determinism" | "launch"
    m: int | None       # rows of the call that differed (the first, in check order)
    subset: str | None  # "prefix" | "suffix" | "all"
    config: dict | None
    selected: bool      # the config M selects (True) or a forced variant/stage (False)
    detail: str
    data: str = ""      # operands: "dense" | "stress" | "given" (accuracy: "dense")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    comparisons: int
    failure: CheckFailure | None = None

    @property
    def first_differing_m(self) -> int | None:
        return self.failure.m if self.failure else None


# (a (m, K) fp8, b_kn (K, N) fp8, a_scale, b_scale, config) -> (m, N) BF16 output
Gemm = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, LaunchConfig],
                torch.Tensor]


def run_gemm(a, b_kn, a_scale, b_scale, config: LaunchConfig) -> torch.Tensor:
    """det-suite's FP8 GEMM under `config`, into a fresh BF16 output, no bias."""
    from det_suite.ops import launch_fp8_gemm

    out = torch.empty((a.shape[0], b_kn.shape[1]), dtype=torch.bfloat16, device=a.device)
    return launch_fp8_gemm(a, b_kn, a_scale, b_scale, None, out, config)


def unique_configs(configs: Iterable[LaunchConfig]) -> list[LaunchConfig]:
    return list(dict.fromkeys(configs))


def forced_configs(entry: EntryLike, stages: Sequence[int] = ()) -> list[LaunchConfig]:
    """Every config the entry can launch, each at its own pipeline depth and at `stages`
    (the depth moves loads, never the arithmetic, so every one must give the same bits)."""
    return unique_configs(replace(v, num_stages=s) for v in entry.variants()
                          for s in (v.num_stages, *stages))


def check_rows(check_ms: Sequence[int], big_m: int, subsets: Sequence[str]) -> list[int]:
    """The row counts of a `prove_entry` run, ascending; ValueError for a bad plan."""
    ms = sorted(set(int(m) for m in check_ms))
    if not ms or ms[0] < 1 or ms[-1] >= big_m:
        raise ValueError(f"check_ms must lie in [1, big_m={big_m}); got {list(check_ms)}")
    unknown = [name for name in subsets if name not in ROW_SUBSETS]
    if not subsets or unknown:
        raise ValueError(f"subsets must be drawn from {ROW_SUBSETS}; got {list(subsets)}")
    return ms


def _config_name(config: LaunchConfig) -> str:
    return (f"bm{config.block_m}-bn{config.block_n}-bk{config.block_k}-sk{config.split_k}"
            f"-w{config.num_warps}-s{config.num_stages}"
            + ("-ws" if config.use_workspace else "") + ("-tma" if config.use_tma else "")
            + ("-swap" if config.swap_ab else ""))


def prove_entry(entry: EntryLike, operands: GemmOperands, *, check_ms: Sequence[int],
                stages: Sequence[int] = (), subsets: Sequence[str] = ROW_SUBSETS,
                gemm: Gemm = run_gemm, recorder: Recorder | None = None) -> CheckResult:
    """Bitwise batch invariance of an entry on `operands` (big_m = operands.rows rows).

    Reference: the big_m-row call with the config `entry.select(big_m)`, run twice (must
    agree with itself). Then, in this order, the first mismatch is the failure:
    1. for m in check_ms ascending, each subset of rows (prefix: the first m, suffix: the
       last m, what a cache hit computes), the config M selects;
    2. the same rows with every config forced (`forced_configs(entry, stages)`);
    3. every forced config on all big_m rows.
    Every comparison goes into `recorder` (a fresh one by default) as a `Comparison` whose
    kind is the subset ("prefix", "suffix", "all") or "repeat", reference "selected".

    Under TRITON_INTERPRET without the GPU-faithful dot (det_suite.platform), tl.dot is
    numpy's matmul, whose BLAS kernel rounds a row differently depending on its position in
    the tile; there only prefix subsets with a single BLOCK_M are meaningful.
    """
    big_m, n, k = operands.rows, operands.n, operands.k
    ms = check_rows(check_ms, big_m, subsets)
    rec = recorder if recorder is not None else Recorder()
    first = len(rec.comparisons)
    w_kn = operands.weight.t()
    shape = f"{n}x{k}"

    def count() -> int:
        return len(rec.comparisons) - first

    def call(config: LaunchConfig, start: int, stop: int) -> torch.Tensor:
        return gemm(operands.a[start:stop], w_kn, operands.a_scale, operands.weight_scale,
                    config)

    def launch_failure(exc, m, subset, config, selected) -> CheckResult:
        rec.error(_config_name(config), operands.label, subset, exc)
        return CheckResult(False, count(), CheckFailure(
            "launch", m, subset, asdict(config), selected, f"{type(exc).__name__}: {exc}",
            operands.data))

    def differs(kind, m, subset, config, selected, test, ref) -> CheckResult | None:
        c = rec.add(comparison(provider=_config_name(config), case=operands.label,
                               shape=shape, kind=kind, test=test, ref=ref, m=m, ref_m=big_m,
                               reference="selected", detail=subset))
        if c.equal:
            return None
        what = "invariance" if kind != "repeat" else "determinism"
        detail = c.detail if test.shape != ref.shape else diff_text(test, ref)
        if kind == "repeat":
            detail = "two identical calls differ: " + detail
        return CheckResult(False, count(), CheckFailure(what, m, subset, asdict(config),
                                                        selected, detail, operands.data))

    ref_config = entry.select(big_m)
    try:
        ref = call(ref_config, 0, big_m)
        again = call(ref_config, 0, big_m)
    except Exception as exc:  # noqa: BLE001 - a config that cannot launch is rejected
        return launch_failure(exc, big_m, "all", ref_config, True)
    failed = differs("repeat", big_m, "all", ref_config, True, again, ref)
    if failed:
        return failed

    forced = forced_configs(entry, stages)
    passes = [(m, True, [entry.select(m)]) for m in ms]
    passes += [(m, False, forced) for m in ms]
    for m, selected, configs in passes:
        for subset in subsets:
            start, stop = subset_rows(subset, m, big_m)
            for config in configs:
                try:
                    out = call(config, start, stop)
                except Exception as exc:  # noqa: BLE001
                    return launch_failure(exc, m, subset, config, selected)
                failed = differs(subset, m, subset, config, selected, out, ref[start:stop])
                if failed:
                    return failed
    for config in forced:
        try:
            out = call(config, 0, big_m)
        except Exception as exc:  # noqa: BLE001
            return launch_failure(exc, big_m, "all", config, False)
        failed = differs("all", big_m, "all", config, False, out, ref)
        if failed:
            return failed
    return CheckResult(True, count())


class SplitKByM:
    """The counterpart of an entry: split-K chosen by M, which the invariance rule forbids.

    Selects split_k 1 (no workspace) for m <= `switch` (with `until`: for switch < m <=
    until) and the entry's own config elsewhere, and lists the split-1 configs among its
    variants, so a prover must reject it both through M's selection and through the forced
    variants (`switch=0`: M never selects a broken config, only the variants list one).
    """

    def __init__(self, entry: EntryLike, switch: int, *, until: int | None = None):
        self.entry, self.switch, self.until = entry, switch, until

    @staticmethod
    def _broken(config: LaunchConfig) -> LaunchConfig:
        return replace(config, split_k=1, use_workspace=False)

    def select(self, m: int) -> LaunchConfig:
        config = self.entry.select(m)
        in_window = m <= self.switch if self.until is None else self.switch < m <= self.until
        return self._broken(config) if in_window else config

    def variants(self) -> tuple[LaunchConfig, ...]:
        return tuple(dict.fromkeys(self.entry.variants()
                                   + tuple(self._broken(v) for v in self.entry.variants())))
