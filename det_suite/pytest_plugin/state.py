"""One run's state: `RunState`, registered at configure as a plugin of its own, holds the
run's settings and what the run has seen, and the hooks that need them.

Under pytest-xdist, collection and deselection happen on the workers: each worker sends the
required tests it collected and deselected through ``config.workeroutput``, the controller
merges them in ``pytest_testnodedown`` and judges them with the reports (which carry the
user properties) it receives in ``pytest_runtest_logreport``. ``--collect-only`` runs
nothing, so the requirement is not checked. Exit code 5 (no tests collected) is left as
pytest reports it, with or without ``--det-require``: an empty run stays a failure by code
5.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from det_suite.platform import family as arch, hardware
from det_suite.pytest_plugin import comparisons, families, markers, summary
from det_suite.pytest_plugin.settings import Settings
from det_suite.pytest_plugin.verdict import (DESELECTED, EXCLUDED_BY_M, Seen, Verdict,
                                             excluded_by_mark_expression, judge)

# config.workeroutput key: the required tests an xdist worker collected and deselected.
REQUIRED_WORKEROUTPUT = "det_suite_required"


# eq=False: pluggy hashes registered plugins (a conftest in a sub-folder makes it build
# per-path hook subsets), and a dataclass with __eq__ is unhashable.
@dataclass(eq=False)
class RunState:
    """Hooks that need the run's settings and what it has seen (one per pytest config)."""

    settings: Settings
    not_run: dict[str, list[str]] = field(default_factory=dict)  # nodeid -> reasons
    # Skips that are not det-suite's (pytest.skip, skipif, importorskip): not run either,
    # and pytest counts them among its "skipped", so the summary must too.
    skipped_otherwise: dict[str, str] = field(default_factory=dict)  # nodeid -> reason
    diagnostic: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, outcome)
    # --det-require bookkeeping; collected and deselected arrive from xdist workers too.
    required: dict[str, tuple[str, ...]] = field(default_factory=dict)  # nodeid -> markers
    deselected: dict[str, str] = field(default_factory=dict)  # nodeid -> EXCLUDED_BY_M | ...
    seen: dict[str, Seen] = field(default_factory=dict)  # nodeid -> what its reports said
    # bit_exact fixture: comparisons summed over every test (and xdist worker), and tests
    bit_exact: int = 0
    bit_exact_tests: int = 0
    _saved_arch_env: tuple[bool, str | None] | None = None
    _verdict: Verdict | None = None
    _exit_set_by_require: bool = False

    def __post_init__(self) -> None:
        if self.settings.arch_as_source == "--det-arch-as":
            # kernels read the override at launch; restore it when this run ends so an
            # in-process run (pytester) doesn't leak the table into its caller.
            self._saved_arch_env = (arch.ARCH_OVERRIDE_ENV in os.environ,
                                    os.environ.get(arch.ARCH_OVERRIDE_ENV))
            os.environ[arch.ARCH_OVERRIDE_ENV] = self.settings.arch_as

    def restore_environment(self) -> None:
        if self._saved_arch_env is None:
            return
        was_set, value = self._saved_arch_env
        if was_set:
            os.environ[arch.ARCH_OVERRIDE_ENV] = value
        else:
            os.environ.pop(arch.ARCH_OVERRIDE_ENV, None)
        self._saved_arch_env = None

    # -- skipping

    def pytest_collection_modifyitems(self, items) -> None:
        # Registered at configure, this runs before pytest's own -m, -k and --deselect
        # (those reach pytest_deselected).
        snap = hardware.current()
        for item in items:
            families.add_family_selection(item)
            markers.mark(item, snap, self.settings)
            if carried := self._required_markers(item):
                self.required[item.nodeid] = carried

    # -- --det-require: what was collected and deselected (on xdist workers, sent home)

    def _required_markers(self, item) -> tuple[str, ...]:
        return tuple(marker for marker in self.settings.require
                     if markers.needs(item, marker))

    def pytest_deselected(self, items) -> None:
        markexpr = self.settings.markexpr
        for item in items:
            if carried := self._required_markers(item):
                self.required[item.nodeid] = carried
                excluded = markexpr and excluded_by_mark_expression(item, markexpr)
                self.deselected[item.nodeid] = EXCLUDED_BY_M if excluded else DESELECTED

    def pytest_collection_finish(self, session) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None and self.settings.require:
            # An xdist worker: the controller collects nothing, so tell it what we saw.
            workeroutput[REQUIRED_WORKEROUTPUT] = {
                "required": {nodeid: list(carried)
                             for nodeid, carried in self.required.items()},
                "deselected": dict(self.deselected)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        # xdist controller: every worker collects every test, so the union is the run's.
        sent = getattr(node, "workeroutput", {}).get(REQUIRED_WORKEROUTPUT)
        if sent:
            self.required.update((nodeid, tuple(carried))
                                 for nodeid, carried in sent["required"].items())
            self.deselected.update(sent["deselected"])

    # -- bookkeeping (on the xdist controller too: reports carry the properties)

    def pytest_runtest_logreport(self, report) -> None:
        if report.skipped:
            reasons = [value for name, value in report.user_properties
                       if name == markers.NOT_RUN_PROPERTY]
            if reasons:
                self.not_run[report.nodeid] = reasons
            elif not hasattr(report, "wasxfail"):  # pytest counts xfails apart
                self.skipped_otherwise[report.nodeid] = summary.skip_reason(report)
        if compared := comparisons.recorded(report):
            self.bit_exact += compared
            self.bit_exact_tests += 1
        if (outcome := markers.diagnostic_outcome(report)) is not None:
            self.diagnostic.append((report.nodeid, outcome))
        if self.settings.require:
            # Under xdist the controller learns which tests are required only when a worker
            # goes down, so every test's outcome is kept (a few words each).
            self.seen.setdefault(report.nodeid, Seen()).add(report)

    def verdict(self) -> Verdict:
        if self._verdict is None:
            self._verdict = judge(self.settings.require, self.required, self.deselected,
                                  self.seen)
        return self._verdict

    def _judges(self, config) -> bool:
        """The requirement is judged by the process that sees every test: not a worker."""
        return (bool(self.settings.require) and not hasattr(config, "workerinput")
                and not config.getoption("collectonly"))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        # Only an otherwise green run is turned red; 5 (nothing collected) and real
        # failures keep pytest's own code.
        if not self._judges(session.config):
            return
        if not self.verdict().met and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self._exit_set_by_require = True

    # -- summary

    def pytest_terminal_summary(self, terminalreporter, exitstatus) -> None:
        if self.not_run or self.skipped_otherwise:
            summary.write_not_run(terminalreporter, self.not_run, self.skipped_otherwise)
        if self.bit_exact_tests:
            summary.write_bit_exact(terminalreporter, self.bit_exact, self.bit_exact_tests)
        if self.settings.require:
            if self._judges(terminalreporter.config):
                summary.write_required(terminalreporter, self.settings, self.verdict(),
                                       exitstatus, self._exit_set_by_require)
            elif terminalreporter.config.getoption("collectonly"):
                summary.write_require_not_checked(terminalreporter, self.settings)
        if self.diagnostic:
            summary.write_diagnostic(terminalreporter, self.settings.arch_as, self.diagnostic)
