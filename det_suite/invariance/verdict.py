"""Per-provider verdicts and the run's exit code.

- A provider that claims invariance passes only with at least one comparison, every one
  bit-exact, and no errors.
- A positive control (expect_variant) passes only when at least one comparison differs:
  if none does, the comparisons could not see a schedule change, so no pass of any other
  provider in the same run means anything.
- Any other provider is measured: its result is reported and never fails the run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from det_suite.invariance.compare import KINDS, Recorder
from det_suite.invariance.providers import Provider


@dataclass(frozen=True)
class Verdict:
    provider: str
    claims_invariance: bool
    expect_variant: bool
    comparisons: int
    differing: int
    errors: int
    by_kind: dict
    invariant: bool | None  # None: nothing was compared
    status: str
    ok: bool
    message: str

    def as_dict(self) -> dict:
        return asdict(self)


def _verdict(provider: Provider, rec: Recorder) -> Verdict:
    mine = [c for c in rec.comparisons if c.provider == provider.name]
    differing = sum(1 for c in mine if not c.equal)
    errors = [e for e in rec.errors if e.provider == provider.name]
    by_kind = {k: sum(1 for c in mine if c.kind == k) for k in KINDS}
    invariant = None if not mine else differing == 0
    total = len(mine)
    error_text = f"; {len(errors)} error(s), first: {errors[0].message}" if errors else ""
    if provider.expect_variant:
        ok = differing > 0
        status = "flagged (control)" if ok else "CONTROL NOT FLAGGED"
        message = (f"positive control: {differing} of {total} comparisons differ, as they "
                   "must" if ok else
                   f"positive control NOT flagged: all {total} comparisons were bit-exact, "
                   "so these comparisons could not detect a schedule change (M-dependent "
                   "BLOCK_K/split-K); no invariance result of this run can be trusted")
    elif provider.claims_invariance:
        ok = total > 0 and differing == 0 and not errors
        if ok:
            status, message = "PASS", f"invariant as claimed: {total} comparisons bit-exact"
        elif total == 0:
            status, message = "FAIL", "claims invariance but nothing was compared"
        else:
            status = "FAIL"
            message = (f"claims invariance: {differing} of {total} comparisons differ"
                       if differing else f"claims invariance: {total} comparisons "
                                         "bit-exact, but the provider failed")
    else:
        ok = True
        status = ("measured: no data" if invariant is None else
                  "measured: invariant" if invariant else "measured: NOT invariant")
        message = (f"not claimed; {differing} of {total} comparisons differ"
                   if total else "not claimed; nothing compared")
    return Verdict(provider.name, provider.claims_invariance, provider.expect_variant, total,
                   differing, len(errors), by_kind, invariant, status, ok,
                   message + error_text)


def verdicts(providers, rec: Recorder) -> list[Verdict]:
    return [_verdict(p, rec) for p in providers]


def exit_code(all_verdicts) -> int:
    """0 when every claim held and every control was flagged, else 1."""
    return 0 if all(v.ok for v in all_verdicts) else 1
