"""What the plugin writes on the terminal: the report header (machine, tiles, versions, the
interpreter, the diagnosis-mode banner) and the summary sections "det-suite: not run",
"det-suite: --det-require=...: met / not met" and "DIAGNOSTIC (not a pass on FAMILY
hardware)"."""

from __future__ import annotations

from collections import Counter

import pytest

from det_suite.platform import hardware
from det_suite.platform.interpreter import INTERPRET_ENV
from det_suite.pytest_plugin.settings import Settings
from det_suite.pytest_plugin.verdict import (DESELECTED, DIAGNOSTIC, EXCLUDED_BY_M, HARDWARE,
                                             NOT_REPORTED, SKIPPED, XFAILED, Verdict,
                                             count_tests)


# ------------------------------------------------------------------ header

def machine_text(snap: hardware.Snapshot) -> str:
    if snap.gpu_usable:
        return snap.describe()
    if snap.cuda_available:
        return f"{snap.describe()} under the Triton interpreter ({INTERPRET_ENV} is set)"
    if snap.interpreter_active:
        return "CPU, Triton interpreter"
    return f"CPU, no Triton interpreter ({INTERPRET_ENV}=0: kernels cannot run)"


def diagnosis_banner(snap: hardware.Snapshot, settings: Settings) -> str:
    family = settings.arch_as
    prefix = f"det-suite: !!! DIAGNOSIS MODE ({settings.arch_as_source}={family}):"
    if not snap.gpu_usable:
        return (f"{prefix} every kernel uses the {family} tile table; {family}-marked tests "
                "still skip without a GPU (the interpreter has no MMA instructions) !!!")
    if snap.family == family:
        return (f"{prefix} {family} is this GPU's own family ({snap.describe()}); results "
                "are ordinary !!!")
    return (f"{prefix} {family}-marked tests run on {snap.describe()} with the {family} "
            f"tile table; results are NOT passes on {family} hardware !!!")


def header_lines(snap: hardware.Snapshot, settings: Settings, *, interpreter_set_here: bool,
                 gpu_faithful: bool) -> list[str]:
    family, source = snap.tile_family()
    lines = [f"det-suite: machine: {machine_text(snap)} | tiles: {family} ({source}) | "
             f"torch {snap.torch_version}, triton {snap.triton_version or 'not installed'}"]
    if interpreter_set_here:
        lines.append(f"det-suite: {INTERPRET_ENV}=1 set by the det-suite plugin "
                     "(no CUDA device): kernels run on the Triton interpreter")
    if gpu_faithful:
        from det_suite.platform.gpu_faithful_interpreter import NOTE

        lines.append(f"det-suite: {NOTE}")
    if settings.arch_as is not None:
        lines.append(diagnosis_banner(snap, settings))
    return lines


# ------------------------------------------------------------------ summary sections

OTHER_SKIP = "other"  # the row label of a skip that is not a det-suite marker's


def skip_reason(report) -> str:
    """A skipped report's reason as pytest's -rs line shows it, without "Skipped: "."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def write_not_run(reporter, not_run: dict[str, list[str]],
                  skipped_otherwise: dict[str, str] | None = None) -> None:
    """Every skipped test, so the count is pytest's "skipped": those skipped by a det-suite
    marker (one row per marker and reason; a test can carry several) and the others."""
    skipped_otherwise = skipped_otherwise or {}
    rows = [reason.partition(": ")[::2] for reasons in not_run.values() for reason in reasons]
    rows += [(OTHER_SKIP, reason) for reason in skipped_otherwise.values()]
    reporter.write_sep("=", "det-suite: not run")
    total = len(not_run) + len(skipped_otherwise)
    if skipped_otherwise:
        reporter.write_line(f"{total} test(s) skipped: not run, not passed ({len(not_run)} by "
                            f"det-suite markers, {len(skipped_otherwise)} by the tests "
                            "themselves: pytest.skip, skipif, importorskip)")
    else:
        reporter.write_line(f"{total} test(s) skipped by det-suite markers: not run, "
                            "not passed")
    width = max(len(label) for label, _why in rows)
    for (label, why), count in sorted(Counter(rows).items(),
                                      key=lambda item: (item[0][0] == OTHER_SKIP, item[0])):
        reporter.write_line(f"  {label:<{width}}  {count:>4}  {why}")


def write_bit_exact(reporter, comparisons: int, tests: int) -> None:
    reporter.write_line(f"det-suite: {comparisons} bit-exact comparisons (torch.equal) in "
                        f"{count_tests(tests)}")


def _reason_heading(reason: str, settings: Settings, machine: str) -> str:
    if reason == DESELECTED:
        return "deselected by -k, --deselect or a plugin"
    if reason == EXCLUDED_BY_M:
        return f"excluded by -m {settings.markexpr!r}"
    if reason == SKIPPED:
        return "skipped at run time, not by det-suite's hardware check"
    if reason == XFAILED:
        return "xfailed (an expected failure is not a pass)"
    if reason == HARDWARE:
        return f"not run (hardware), skipped by det-suite's marker check on {machine}"
    if reason == DIAGNOSTIC:
        family = settings.arch_as
        return (f"diagnostic, run in diagnosis mode ({settings.arch_as_source}={family}) with "
                f"the {family} tile table on {machine}, not a pass on any hardware")
    if reason == NOT_REPORTED:
        return "not reported (collected, but no result arrived: did the run stop early?)"
    raise AssertionError(f"no heading written for reason {reason!r}")


def _other_marker_note(verdict: Verdict) -> str:
    if not verdict.other_marker:
        return ""
    names = sorted({reason.split(":", 1)[0] for reasons in verdict.other_marker.values()
                    for reason in reasons})
    return (f"; {count_tests(len(verdict.other_marker))} skipped for markers not required "
            f"({', '.join(names)}), see \"det-suite: not run\"")


def write_required(reporter, settings: Settings, verdict: Verdict, exitstatus,
                   set_by_require: bool) -> None:
    names = ",".join(settings.require)
    machine = machine_text(hardware.current())
    if verdict.met:
        if verdict.failed:
            ran = (f"{count_tests(verdict.passed + verdict.failed)} ran on {machine}: "
                   f"{verdict.passed} passed, {verdict.failed} failed (failures fail the run)")
        else:
            ran = f"{count_tests(verdict.passed)} ran and passed on {machine}"
        reporter.write_line(f"det-suite: --det-require={names}: met: {ran}"
                            f"{_other_marker_note(verdict)}")
        return
    reporter.write_sep("=", f"det-suite: --det-require={names} not met", red=True)
    for marker, text in verdict.markers.items():
        reporter.write_line(f"--det-require={marker}: {text}", red=not text.startswith("met:"))
    for reason, tests in verdict.unmet.items():
        reporter.write_line(f"{len(tests)} {_reason_heading(reason, settings, machine)}:")
        for test in tests:
            reporter.write_line(f"  {test.nodeid}" + (f"  ({test.detail})" if test.detail else ""))
    reporter.write_line(_failing_exit_text(exitstatus, set_by_require), red=True)


def write_require_not_checked(reporter, settings: Settings) -> None:
    reporter.write_line(f"det-suite: --det-require={','.join(settings.require)}: not "
                        "checked (--collect-only runs no test)")


def _failing_exit_text(exitstatus, set_by_require: bool) -> str:
    # pytest_terminal_summary gets the exit status from before pytest_sessionfinish.
    if set_by_require:
        return "the run fails: exit code 1, set by --det-require (nothing else failed)"
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        return "the run fails: exit code 5 (no tests collected), as pytest reports it"
    if exitstatus == pytest.ExitCode.TESTS_FAILED:
        return "the run fails: exit code 1 (tests failed as well)"
    return f"the run fails: exit code {int(exitstatus)}"


def write_diagnostic(reporter, family: str, ran: list[tuple[str, str]]) -> None:
    reporter.write_sep("=", f"DIAGNOSTIC (not a pass on {family} hardware)", yellow=True)
    for nodeid, outcome in ran:
        reporter.write_line(f"  {outcome.upper():<7} {nodeid}")
