"""The ``--det-require=MARKER[,MARKER]`` judgement: did this run test MARKER?

A run that did not test a required marker fails (exit code 1 when the run is otherwise
green), so a GPU workflow on a runner that lost its GPU, or whose command line lost its
GPU tests, cannot go green. The rule: a required marker counts as met only if at least one
test carrying it was collected, and every collected test carrying it was selected (not
deselected, not excluded by -m), ran, and passed (or failed -- a failure already fails the
run) on the real hardware, not in diagnosis mode. So each of these leaves it unmet, and the
summary lists the tests under that reason (`UNMET_REASONS`): deselected (``-k``,
``--deselect``, a plugin), excluded by ``-m``, skipped at run time (``pytest.skip``, a
skip/skipif mark, a fixture), xfailed, not run (hardware: skipped by the marker check for a
required marker), diagnostic (ran under a foreign tile table), collected but never
reported, and "no test carrying MARKER was collected".

One exception keeps the rule usable on one machine: a test skipped by the marker check only
for a marker that is *not* required (a ``gpu`` + ``sm120`` test on an H200 with
``--det-require=gpu,sm90``) is out of scope (`OTHER_MARKER`); it is counted under
"det-suite: not run" and named in the "met" line, and it meets nothing: a marker none of
whose tests ran is unmet.

`Seen` records what one test's reports said on whichever process received them; `judge`
turns the required tests, the deselected ones and what was seen into a `Verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from det_suite.pytest_plugin.markers import NOT_RUN_PROPERTY, diagnostic_outcome

# Why a required test did not meet the requirement, in the order the summary lists them.
DESELECTED = "deselected"
EXCLUDED_BY_M = "excluded by -m"
SKIPPED = "skipped at run time"
XFAILED = "xfailed"
HARDWARE = "not run (hardware)"
DIAGNOSTIC = "diagnostic"
NOT_REPORTED = "not reported"
UNMET_REASONS = (DESELECTED, EXCLUDED_BY_M, SKIPPED, XFAILED, HARDWARE, DIAGNOSTIC,
                 NOT_REPORTED)
# Statuses that are not a reason: the test ran, or is out of the requirement's scope.
PASSED, FAILED, OTHER_MARKER = "passed", "failed", "skipped for a marker not required"


def count_tests(count: int) -> str:
    return f"{count} test" if count == 1 else f"{count} tests"


def excluded_by_mark_expression(item, markexpr: str) -> bool:
    """Whether `item` fails the -m expression (else -k, --deselect or a plugin removed it).
    pytest keeps its expression parser private; without it, say "deselected"."""
    try:
        from _pytest.mark.expression import Expression

        expression = Expression.compile(markexpr)
    except (ImportError, SyntaxError):
        return False
    missing = object()

    def matches(name: str, /, **kwargs) -> bool:
        return any(mark.name == name and all(mark.kwargs.get(key, missing) == value
                                             for key, value in kwargs.items())
                   for mark in item.iter_markers())

    return not expression.evaluate(matches)


def _skip_text(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""


@dataclass
class Seen:
    """What the setup, call and teardown reports of one test said (on any process)."""

    not_run: list[str] | None = None  # det-suite's marker skip: 'marker: reason' each
    skipped: str | None = None        # any other skip: its reason
    xfailed: str | None = None        # its xfail reason
    diagnostic: str | None = None     # outcome of a run under a foreign tile table
    failed: bool = False
    passed: bool = False              # the call passed (an XPASS too: the body succeeded)

    def add(self, report) -> None:
        properties = report.user_properties
        if report.skipped:
            own = [value for name, value in properties if name == NOT_RUN_PROPERTY]
            if hasattr(report, "wasxfail"):
                self.xfailed = report.wasxfail
            elif own:
                self.not_run = own
            else:
                self.skipped = _skip_text(report)
            return
        if report.failed:
            self.failed = True
        elif report.when == "call":
            self.passed = True
        if (outcome := diagnostic_outcome(report)) is not None:
            self.diagnostic = outcome


class Unmet(NamedTuple):
    nodeid: str
    detail: str


@dataclass(frozen=True)
class Verdict:
    """--det-require judged: per marker a status line, per reason the tests."""

    met: bool
    markers: dict[str, str]                 # marker -> what happened to its tests
    unmet: dict[str, list[Unmet]]           # reason (UNMET_REASONS) -> tests, sorted
    passed: int                             # required tests that ran and passed
    failed: int                             # required tests that ran and failed
    other_marker: dict[str, list[str]]      # out of scope: nodeid -> det-suite reasons


def _status(nodeid: str, require: tuple[str, ...], deselected: dict[str, str],
            seen: dict[str, Seen]) -> tuple[str, str]:
    """(status, detail) of one required test: PASSED, FAILED, OTHER_MARKER or a reason."""
    if nodeid in deselected:
        return deselected[nodeid], ""
    record = seen.get(nodeid)
    if record is None:
        return NOT_REPORTED, ""
    if record.not_run is not None:
        detail = "; ".join(record.not_run)
        if any(reason.split(":", 1)[0] in require for reason in record.not_run):
            return HARDWARE, detail
        return OTHER_MARKER, detail
    if record.xfailed is not None:
        return XFAILED, record.xfailed
    if record.skipped is not None:
        return SKIPPED, record.skipped
    if record.diagnostic is not None:
        return DIAGNOSTIC, record.diagnostic
    if record.failed:
        return FAILED, ""
    if record.passed:
        return PASSED, ""
    return NOT_REPORTED, ""


def judge(require: tuple[str, ...], required: dict[str, tuple[str, ...]],
          deselected: dict[str, str], seen: dict[str, Seen]) -> Verdict:
    status = {nodeid: _status(nodeid, require, deselected, seen) for nodeid in required}
    unmet: dict[str, dict[str, str]] = {}
    markers: dict[str, str] = {}
    for marker in require:
        tests = sorted(nodeid for nodeid, carried in required.items() if marker in carried)
        bad = [nodeid for nodeid in tests if status[nodeid][0] in UNMET_REASONS]
        ran = [nodeid for nodeid in tests if status[nodeid][0] in (PASSED, FAILED)]
        if not tests:
            markers[marker] = f"no test carrying {marker} was collected"
            continue
        if not bad and not ran:
            # Every one skipped for another marker: nothing carrying this one was tested.
            markers[marker] = (f"no test carrying {marker} ran: {count_tests(len(tests))} "
                               "skipped for markers not required")
            bad = tests
        elif bad:
            markers[marker] = (f"{len(bad)} of {count_tests(len(tests))} carrying {marker} "
                               "did not run and pass")
        else:
            failed = sum(1 for nodeid in ran if status[nodeid][0] == FAILED)
            markers[marker] = (f"met: {count_tests(len(ran))} ran"
                               + (f" ({failed} failed)" if failed else " and passed"))
        for nodeid in bad:
            reason, detail = status[nodeid]
            unmet.setdefault(HARDWARE if reason == OTHER_MARKER else reason, {})[nodeid] = detail
    return Verdict(
        met=not unmet and all(text.startswith("met:") for text in markers.values()),
        markers=markers,
        unmet={reason: [Unmet(nodeid, detail) for nodeid, detail in sorted(unmet[reason].items())]
               for reason in UNMET_REASONS if reason in unmet},
        passed=sum(1 for s, _ in status.values() if s == PASSED),
        failed=sum(1 for s, _ in status.values() if s == FAILED),
        other_marker={nodeid: seen[nodeid].not_run for nodeid, (s, _) in status.items()
                      if s == OTHER_MARKER})
