"""Proving an entry before it is stored: accuracy against a float64 reference, then bitwise
batch invariance through the invariance package's prover (`invariance.compare.prove_entry`)
on each of its operand sets (`invariance.cases.gemm_operands`: dense, then the harness's
cancelling-pair stress data).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Sequence

import torch

from det_suite.invariance.cases import GemmOperands, dense_operands, gemm_operands
from det_suite.invariance.compare import (ROW_SUBSETS, CheckFailure, CheckResult, EntryLike,
                                          Gemm, check_rows, forced_configs, prove_entry,
                                          run_gemm, unique_configs)

CHECK_MS = (1, 7, 16, 33, 64, 65, 127, 129)
CHECK_BIG_M = 4097
CHECK_STAGES = (2, 3)
CHECK_SUBSETS = ROW_SUBSETS
# Operand sets the invariance check runs on, in order: dense random FP8 (what a real layer
# sees) then the cancellation stress data, on which a change of summation order shows
# (invariance.cases.OPERAND_DATA says how much more it sees).
CHECK_DATA = ("dense", "stress")
ACCURACY_M = 129

__all__ = ["ACCURACY_M", "CHECK_BIG_M", "CHECK_DATA", "CHECK_MS", "CHECK_STAGES",
           "CHECK_SUBSETS", "CheckFailure", "CheckResult", "EntryLike", "check_entry",
           "check_entry_accuracy", "check_invariance"]


def check_entry_accuracy(entry: EntryLike, n: int, k: int, *, device, m: int = ACCURACY_M,
                         stages: Sequence[int] = CHECK_STAGES, seed: int = 0,
                         gemm: Gemm = run_gemm) -> CheckResult:
    """Every config the entry can launch gives the right product on dense random data."""
    from det_suite.bench.gemm import check_accuracy

    a, w = dense_operands(n, k, m, device=device, seed=seed + 17)
    ref = a.double() @ w.double().t()  # exact products, fp64 sums: no TF32, no doubt
    one = torch.ones(1, dtype=torch.float32, device=a.device)
    configs = unique_configs([entry.select(m)] + forced_configs(entry, stages))
    for config in configs:
        try:
            out = gemm(a, w.t(), one, one, config)
        except Exception as exc:  # noqa: BLE001 - a config that cannot launch is rejected
            return CheckResult(False, 0, CheckFailure("launch", m, "all", asdict(config),
                                                      False, f"{type(exc).__name__}: {exc}",
                                                      "dense"))
        acc = check_accuracy(out, ref)
        if not acc.ok:
            return CheckResult(False, 0, CheckFailure("accuracy", m, "all", asdict(config),
                                                      False, acc.reason, "dense"))
    return CheckResult(True, len(configs))


def check_invariance(entry: EntryLike, n: int, k: int, *, device,
                     check_ms: Sequence[int] = CHECK_MS, big_m: int = CHECK_BIG_M,
                     stages: Sequence[int] = CHECK_STAGES,
                     subsets: Sequence[str] = CHECK_SUBSETS, data: str = "stress",
                     operands: tuple[torch.Tensor, torch.Tensor] | None = None,
                     seed: int = 0, gemm: Gemm = run_gemm) -> CheckResult:
    """Bitwise batch invariance of an entry (anything with select(m) and variants()) on
    `big_m` rows of one operand set: `invariance.compare.prove_entry`, which says what is
    compared in which order. `data` picks the operands (`invariance.cases.gemm_operands`:
    "stress" or "dense"); `operands` (a (big_m, K), w [N, K] FP8, unit scales) overrides it.
    """
    check_rows(check_ms, big_m, subsets)  # a bad plan fails before operands are drawn
    if operands is None:
        ops = gemm_operands(n, k, big_m, data=data, device=device, seed=seed)
    else:
        a_big, w = operands
        if tuple(a_big.shape) != (big_m, k) or tuple(w.shape) != (n, k):
            raise ValueError(f"operands must be a ({big_m}, {k}) and w ({n}, {k}); got "
                             f"{tuple(a_big.shape)} and {tuple(w.shape)}")
        one = torch.ones(1, dtype=torch.float32, device=a_big.device)
        ops = GemmOperands(a_big, w, one, one, "given", f"{n}x{k}/given")
    return prove_entry(entry, ops, check_ms=check_ms, stages=stages, subsets=subsets,
                       gemm=gemm)


def check_entry(entry: EntryLike, n: int, k: int, *, device, check_ms=CHECK_MS,
                big_m: int = CHECK_BIG_M, stages=CHECK_STAGES, subsets=CHECK_SUBSETS,
                data: Sequence[str] = CHECK_DATA, seed: int = 0,
                gemm: Gemm = run_gemm) -> CheckResult:
    """Accuracy first (cheap), then invariance on each operand set of `data` in order; the
    first failure rejects the entry (its `data` says which operands showed it)."""
    result = check_entry_accuracy(entry, n, k, device=device, stages=stages, seed=seed,
                                  gemm=gemm)
    if not result.passed:
        return result
    comparisons = result.comparisons
    for kind in data:
        result = check_invariance(entry, n, k, device=device, check_ms=check_ms, big_m=big_m,
                                  stages=stages, subsets=subsets, data=kind, seed=seed,
                                  gemm=gemm)
        comparisons += result.comparisons
        if not result.passed:
            break
    return replace(result, comparisons=comparisons)
