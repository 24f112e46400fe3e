"""det-suite's pytest plugin: markers, options, hardware auto-skip, honest reporting.

Loading
-------
The primary way is the pytest11 entry point ``det_suite`` (pyproject.toml): once the package
is installed (``pip install -e .[test]``, as tox and CI do) every pytest run loads it, and no
tests/conftest.py is needed. Without an install, load it explicitly:
``pytest -p det_suite.pytest_plugin``. With the package installed, ``-p det_suite`` (the
entry-point name) also works.

Both at once (installed *and* ``-p det_suite.pytest_plugin``) is safe. pytest registers
``-p`` plugins before it autoloads entry points, so the module is first registered under its
module name; loading the entry point would then register the same module again under
``det_suite`` and pluggy would fail with "Plugin already registered under a different name".
`pytest_plugin_registered` below sees the first registration and blocks the name
``det_suite``, so autoload skips the entry point and the plugin is active exactly once.
The one combination that cannot be guarded is ``pytest_plugins = ["det_suite.pytest_plugin"]``
in a conftest.py of an installed checkout (conftests load after autoload, and pluggy
raises before any hook of ours runs): don't write that conftest; it is not needed.
``-p no:det_suite`` disables the installed plugin.

Behaviour
---------
* At import, with no CUDA device and TRITON_INTERPRET unset, sets TRITON_INTERPRET=1 so
  kernels imported by conftests and test modules run on Triton's interpreter; the report
  header says so.
* Markers (registered, so ``--strict-markers`` holds) skip a test whose needs this machine
  doesn't meet, with a reason naming what is needed and what was found. Each skip also
  records a ``det_suite_not_run`` user property (it reaches junit XML and survives xdist),
  and the terminal summary counts them per marker under "det-suite: not run": a skipped GPU
  test is not run, never passed.
* ``--det-arch-as=FAMILY`` (or DET_SUITE_ARCH already in the environment) is diagnosis mode:
  every kernel uses FAMILY's tile table, FAMILY's arch-marked tests run on whatever GPU is
  present, tests marked for another family skip (they would test FAMILY's table, not
  theirs), and every GPU test that ran under a table foreign to the GPU gets the user
  property ``diagnostic_arch_as`` and is listed under "DIAGNOSTIC (not a pass on FAMILY
  hardware)".
* ``--det-require=MARKER[,MARKER]`` makes a run that did not test MARKER fail (exit code 1
  when the run is otherwise green), so a GPU workflow on a runner that lost its GPU, or
  whose command line lost its GPU tests, cannot go green. The rule: a required marker
  counts as met only if at least one test carrying it was collected, and every collected
  test carrying it was selected (not deselected, not excluded by -m), ran, and passed (or
  failed -- a failure already fails the run) on the real hardware, not in diagnosis mode.
  So each of these leaves it unmet, and the summary lists the tests under that reason:
  deselected (``-k``, ``--deselect``, a plugin), excluded by ``-m``, skipped at run time
  (``pytest.skip``, a skip/skipif mark, a fixture), xfailed, not run (hardware: skipped by
  the marker check for a required marker), diagnostic (ran under a foreign tile table),
  collected but never reported, and "no test carrying MARKER was collected". One exception
  keeps the rule usable on one machine: a test skipped by the marker check only for a
  marker that is *not* required (a ``gpu`` + ``sm120`` test on an H200 with
  ``--det-require=gpu,sm90``) is out of scope; it is counted under "det-suite: not run"
  and named in the "met" line, and it meets nothing: a marker none of whose tests ran is
  unmet. When met, the summary says "det-suite: --det-require=M: met: N tests ran and
  passed on MACHINE". ``--collect-only`` runs nothing, so the requirement is not checked.
  Under pytest-xdist, collection and deselection happen on the workers: each worker sends
  the required tests it collected and deselected through ``config.workeroutput``, the
  controller merges them in ``pytest_testnodedown`` and judges them with the reports
  (which carry the user properties) it receives in ``pytest_runtest_logreport``.
* Exit code 5 (no tests collected) is left as pytest reports it, with or without
  ``--det-require``: an empty run stays a failure by code 5.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import pytest

from det_suite.platform import family as arch, hardware

ENTRY_POINT_NAME = "det_suite"
SESSION_PLUGIN_NAME = "det_suite_session"
NOT_RUN_PROPERTY = "det_suite_not_run"
DIAGNOSTIC_PROPERTY = "diagnostic_arch_as"
# config.workeroutput key: the required tests an xdist worker collected and deselected.
REQUIRED_WORKEROUTPUT = "det_suite_required"
INTERPRET_ENV = "TRITON_INTERPRET"

MARKERS = {
    "gpu": "needs a CUDA GPU, with kernels compiled for it (not the Triton interpreter)",
    "fp8": "needs a GPU with FP8 MMA (compute capability >= 8.9)",
    "sm90": "needs an SM90 GPU (compute capability 9.0); arch-specific assertions",
    "sm120": "needs an SM12x GPU (compute capability 12.x); arch-specific assertions",
    "graph": "needs CUDA Graphs (a CUDA GPU, not the Triton interpreter)",
    "model": "needs transformers and safetensors (pip install 'det-suite[model]')",
    "sglang": "needs sglang (pip install 'det-suite[sglang]')",
    "slow": "slow; skipped unless --run-slow, run automatically when a GPU is present",
    "perf": "timing; skipped unless --run-perf and a GPU is present",
}
# Markers whose tests execute kernels on the GPU: what diagnosis mode must label.
GPU_MARKERS = ("gpu", "fp8", "sm90", "sm120", "graph", "perf")
# Arch markers are named after the family whose hardware they need.
ARCH_MARKERS = ("sm90", "sm120")


# ------------------------------------------------------------------ load-time interpreter

def _default_to_interpreter() -> bool:
    """Without a GPU, kernels can only run on the interpreter; set it before any test
    module imports a kernel (triton.jit reads the variable when a kernel is defined)."""
    if INTERPRET_ENV in os.environ or hardware.cuda_available():
        return False
    os.environ[INTERPRET_ENV] = "1"
    hardware.current.cache_clear()
    return True


# Import runs once per process, however many pytest sessions (pytester) follow.
INTERPRETER_SET_BY_PLUGIN = _default_to_interpreter()


# ------------------------------------------------------------------ double-load guard

def pytest_plugin_registered(plugin, plugin_name, manager) -> None:
    if plugin is sys.modules[__name__] and plugin_name != ENTRY_POINT_NAME:
        # Registered by -p under the module name: stop autoload registering it again.
        manager.set_blocked(ENTRY_POINT_NAME)


# ------------------------------------------------------------------ options

def _family_argument(value: str) -> str:
    if value not in arch.KNOWN_FAMILIES:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a GPU family with a tile table; expected one of "
            f"{', '.join(arch.KNOWN_FAMILIES)}")
    return value


def _marker_list_argument(value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in MARKERS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{value!r} must be a comma-separated list of det-suite markers "
            f"({', '.join(MARKERS)}); unknown: {', '.join(unknown) or '(empty list)'}")
    return names


def pytest_addoption(parser) -> None:
    group = parser.getgroup("det-suite", "det-suite hardware markers")
    group.addoption("--run-slow", action="store_true", default=False,
                    help="run tests marked slow (they run anyway when a GPU is present)")
    group.addoption("--run-perf", action="store_true", default=False,
                    help="run tests marked perf (they still need a GPU)")
    group.addoption("--det-arch-as", metavar="FAMILY", type=_family_argument, default=None,
                    help="diagnosis mode: use FAMILY's tile table (sets DET_SUITE_ARCH) and "
                         "run FAMILY's arch-marked tests on the GPU present; results are "
                         "labelled DIAGNOSTIC, never passes on FAMILY hardware. One of "
                         + ", ".join(arch.KNOWN_FAMILIES))
    group.addoption("--det-require", metavar="MARKERS", type=_marker_list_argument,
                    default=(),
                    help="comma-separated markers whose tests must run here: the run "
                         "fails (exit code 1) unless, for each marker, at least one test "
                         "carrying it was collected and every such test was selected (not "
                         "deselected, not excluded by -m) and ran (not skipped, not "
                         "xfailed) on this machine's own hardware, outside diagnosis mode; "
                         "a test failure fails the run by itself, and a test skipped only "
                         "for a marker that is not required is left out")


# ------------------------------------------------------------------ requirements

@dataclass(frozen=True)
class Settings:
    """What a run decided at configure time; requirements read it with the snapshot."""

    run_slow: bool
    run_perf: bool
    arch_as: str | None        # forced tile family, None outside diagnosis mode
    arch_as_source: str | None  # "--det-arch-as" or "DET_SUITE_ARCH"
    require: tuple[str, ...]
    markexpr: str = ""         # -m, to say "excluded by -m EXPR"


def _found(snap: hardware.Snapshot) -> str:
    if not snap.cuda_available:
        where = "CPU, Triton interpreter" if snap.interpreter_active else "CPU"
        return f"found no CUDA device ({where})"
    if snap.interpreter_active:
        return (f"found {snap.describe()}, but {INTERPRET_ENV} is set so kernels run on "
                "the Triton interpreter")
    return f"found {snap.describe()}"


def _needs_gpu(snap: hardware.Snapshot, what: str) -> str | None:
    return None if snap.gpu_usable else f"needs {what}; {_found(snap)}"


def _needs_capability(snap: hardware.Snapshot, what: str, accept) -> str | None:
    if snap.gpu_usable and accept(snap.capability):
        return None
    return f"needs {what}; {_found(snap)}"


def _needs_packages(snap: hardware.Snapshot, what: str, names: tuple[str, ...]) -> str | None:
    missing = [name for name in names if not snap.has_package(name)]
    if not missing:
        return None
    return f"needs {what}; not importable: {', '.join(missing)}"


def _arch_requirement(marker: str, snap: hardware.Snapshot, settings: Settings) -> str | None:
    wanted = {"sm90": ("an SM90 GPU (compute capability 9.0)", lambda c: c == (9, 0)),
              "sm120": ("an SM12x GPU (compute capability 12.x)", lambda c: c[0] == 12)}
    what, accept = wanted[marker]
    if settings.arch_as == marker:
        return _needs_gpu(snap, f"a CUDA GPU to run {marker} tests in diagnosis mode "
                                "(the interpreter has no MMA instructions to test)")
    reason = _needs_capability(snap, what, accept)
    if reason is None and settings.arch_as is not None:
        return (f"not run in diagnosis mode: {arch.ARCH_OVERRIDE_ENV}={settings.arch_as} "
                f"forces the {settings.arch_as} tile table, so this test would not test "
                f"{marker}'s")
    return reason


def _requirement(marker: str, snap: hardware.Snapshot, settings: Settings) -> str | None:
    """Why a test with `marker` cannot run here, or None when it can."""
    if marker in ARCH_MARKERS:
        return _arch_requirement(marker, snap, settings)
    if marker == "gpu":
        return _needs_gpu(snap, "a CUDA GPU outside the Triton interpreter")
    if marker == "fp8":
        return _needs_capability(snap, "a GPU with compute capability >= 8.9 (FP8 MMA)",
                                 lambda c: c >= (8, 9))
    if marker == "graph":
        return _needs_gpu(snap, "CUDA Graphs (a CUDA GPU outside the Triton interpreter)")
    if marker == "model":
        return _needs_packages(snap, "transformers and safetensors "
                                     "(pip install 'det-suite[model]')",
                               ("transformers", "safetensors"))
    if marker == "sglang":
        return _needs_packages(snap, "sglang (pip install 'det-suite[sglang]')", ("sglang",))
    if marker == "slow":
        if settings.run_slow or snap.gpu_usable:
            return None
        return f"runs only with --run-slow or on a GPU; {_found(snap)}"
    if marker == "perf":
        if not settings.run_perf:
            return "runs only with --run-perf (timings need a quiet GPU and are opt-in)"
        return _needs_gpu(snap, "a CUDA GPU outside the Triton interpreter to time")
    raise AssertionError(f"no requirement written for marker {marker!r}")


def unmet_requirements(item, snap: hardware.Snapshot, settings: Settings) -> list[str]:
    """'marker: reason' for every det-suite marker on `item` this machine can't honour."""
    return [f"{marker}: {reason}" for marker in MARKERS
            if item.get_closest_marker(marker) is not None
            and (reason := _requirement(marker, snap, settings)) is not None]


def _runs_under_foreign_table(item, snap: hardware.Snapshot, settings: Settings) -> bool:
    if settings.arch_as is None or snap.family == settings.arch_as:
        return False
    return any(item.get_closest_marker(marker) is not None for marker in GPU_MARKERS)


# ------------------------------------------------------------------ configure

def _resolve_arch_as(config) -> tuple[str | None, str | None]:
    option = config.getoption("det_arch_as")
    if option:
        return option, "--det-arch-as"
    inherited = os.environ.get(arch.ARCH_OVERRIDE_ENV)
    if not inherited:
        return None, None
    try:
        arch.validate_family(inherited, argument=arch.ARCH_OVERRIDE_ENV)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    return inherited, arch.ARCH_OVERRIDE_ENV


_DOT_STACK_KEY = pytest.StashKey()


def pytest_configure(config) -> None:
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    arch_as, source = _resolve_arch_as(config)
    settings = Settings(run_slow=config.getoption("run_slow"),
                        run_perf=config.getoption("run_perf"),
                        arch_as=arch_as, arch_as_source=source,
                        require=tuple(config.getoption("det_require")),
                        markexpr=config.getoption("markexpr") or "")
    config.pluginmanager.register(RunState(settings), SESSION_PLUGIN_NAME)
    _enter_fixed_order_dot(config)


def _enter_fixed_order_dot(config) -> None:
    """On the interpreter, tl.dot must be row-count invariant like every GPU MMA, or CPU
    invariance tests measure numpy's BLAS instead of the kernel (det_suite.platform.gpu_faithful_interpreter)."""
    from det_suite.platform.family import interpreter_active

    if interpreter_active():
        from det_suite.platform.gpu_faithful_interpreter import fixed_order_dot

        stack = contextlib.ExitStack()
        stack.enter_context(fixed_order_dot())
        config.stash[_DOT_STACK_KEY] = stack


def pytest_unconfigure(config) -> None:
    stack = config.stash.get(_DOT_STACK_KEY, None)
    if stack is not None:
        stack.close()
    state = config.pluginmanager.get_plugin(SESSION_PLUGIN_NAME)
    if state is not None:
        state.restore_environment()
        config.pluginmanager.unregister(state, SESSION_PLUGIN_NAME)


# ------------------------------------------------------------------ per-run hooks

@dataclass
class RunState:
    """Hooks that need the run's settings and what it has seen (one per pytest config)."""

    settings: Settings
    not_run: dict[str, list[str]] = field(default_factory=dict)  # nodeid -> reasons
    diagnostic: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, outcome)
    # --det-require bookkeeping; collected and deselected arrive from xdist workers too.
    required: dict[str, tuple[str, ...]] = field(default_factory=dict)  # nodeid -> markers
    deselected: dict[str, str] = field(default_factory=dict)  # nodeid -> EXCLUDED_BY_M | ...
    seen: dict[str, Seen] = field(default_factory=dict)  # nodeid -> what its reports said
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

    # -- header

    def pytest_report_header(self, config) -> list[str]:
        snap = hardware.current()
        family, source = snap.tile_family()
        lines = [f"det-suite: machine: {_machine_text(snap)} | tiles: {family} ({source}) | "
                 f"torch {snap.torch_version}, triton {snap.triton_version or 'not installed'}"]
        if INTERPRETER_SET_BY_PLUGIN:
            lines.append(f"det-suite: {INTERPRET_ENV}=1 set by the det-suite plugin "
                         "(no CUDA device): kernels run on the Triton interpreter")
        if config.stash.get(_DOT_STACK_KEY, None) is not None:
            from det_suite.platform.gpu_faithful_interpreter import NOTE

            lines.append(f"det-suite: {NOTE}")
        if self.settings.arch_as is not None:
            lines.append(_diagnosis_banner(snap, self.settings))
        return lines

    # -- skipping

    def pytest_collection_modifyitems(self, items) -> None:
        # A skip mark (rather than pytest.skip in setup) makes -ra point at the test, and
        # nothing of the test (fixtures included) runs. Registered at configure, this runs
        # before pytest's own -m, -k and --deselect (those reach pytest_deselected).
        snap = hardware.current()
        for item in items:
            self._mark(item, snap)
            if markers := self._required_markers(item):
                self.required[item.nodeid] = markers

    def _mark(self, item, snap: hardware.Snapshot) -> None:
        reasons = unmet_requirements(item, snap, self.settings)
        if reasons:
            item.user_properties.extend((NOT_RUN_PROPERTY, reason) for reason in reasons)
            item.add_marker(pytest.mark.skip(reason="; ".join(reasons)))
        elif _runs_under_foreign_table(item, snap, self.settings):
            item.user_properties.append((DIAGNOSTIC_PROPERTY, self.settings.arch_as))

    # -- --det-require: what was collected and deselected (on xdist workers, sent home)

    def _required_markers(self, item) -> tuple[str, ...]:
        return tuple(marker for marker in self.settings.require
                     if item.get_closest_marker(marker) is not None)

    def pytest_deselected(self, items) -> None:
        markexpr = self.settings.markexpr
        for item in items:
            if markers := self._required_markers(item):
                self.required[item.nodeid] = markers
                excluded = markexpr and _excluded_by_mark_expression(item, markexpr)
                self.deselected[item.nodeid] = EXCLUDED_BY_M if excluded else DESELECTED

    def pytest_collection_finish(self, session) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None and self.settings.require:
            # An xdist worker: the controller collects nothing, so tell it what we saw.
            workeroutput[REQUIRED_WORKEROUTPUT] = {
                "required": {nodeid: list(markers) for nodeid, markers in self.required.items()},
                "deselected": dict(self.deselected)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        # xdist controller: every worker collects every test, so the union is the run's.
        sent = getattr(node, "workeroutput", {}).get(REQUIRED_WORKEROUTPUT)
        if sent:
            self.required.update((nodeid, tuple(markers))
                                 for nodeid, markers in sent["required"].items())
            self.deselected.update(sent["deselected"])

    # -- bookkeeping (on the xdist controller too: reports carry the properties)

    def pytest_runtest_logreport(self, report) -> None:
        properties = report.user_properties
        if report.skipped:
            reasons = [value for name, value in properties if name == NOT_RUN_PROPERTY]
            if reasons:
                self.not_run[report.nodeid] = reasons
        ran = report.when == "call" or (report.when == "setup" and report.failed)
        if ran and any(name == DIAGNOSTIC_PROPERTY for name, _ in properties):
            outcome = "error" if report.when == "setup" else report.outcome
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
        if self.not_run:
            _write_not_run(terminalreporter, self.not_run)
        if self.settings.require:
            if self._judges(terminalreporter.config):
                _write_required(terminalreporter, self.settings, self.verdict(),
                                exitstatus, self._exit_set_by_require)
            elif terminalreporter.config.getoption("collectonly"):
                terminalreporter.write_line(
                    f"det-suite: --det-require={','.join(self.settings.require)}: not "
                    "checked (--collect-only runs no test)")
        if self.diagnostic:
            _write_diagnostic(terminalreporter, self.settings.arch_as, self.diagnostic)


# ------------------------------------------------------------------ --det-require verdict

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


def _excluded_by_mark_expression(item, markexpr: str) -> bool:
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
        ran = report.when == "call" or (report.when == "setup" and report.failed)
        if ran and any(name == DIAGNOSTIC_PROPERTY for name, _ in properties):
            self.diagnostic = "error" if report.when == "setup" else report.outcome


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
            markers[marker] = (f"no test carrying {marker} ran: {_tests(len(tests))} "
                               "skipped for markers not required")
            bad = tests
        elif bad:
            markers[marker] = (f"{len(bad)} of {_tests(len(tests))} carrying {marker} did "
                               "not run and pass")
        else:
            failed = sum(1 for nodeid in ran if status[nodeid][0] == FAILED)
            markers[marker] = (f"met: {_tests(len(ran))} ran"
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


# ------------------------------------------------------------------ text

def _machine_text(snap: hardware.Snapshot) -> str:
    if snap.gpu_usable:
        return snap.describe()
    if snap.cuda_available:
        return f"{snap.describe()} under the Triton interpreter ({INTERPRET_ENV} is set)"
    if snap.interpreter_active:
        return "CPU, Triton interpreter"
    return f"CPU, no Triton interpreter ({INTERPRET_ENV}=0: kernels cannot run)"


def _diagnosis_banner(snap: hardware.Snapshot, settings: Settings) -> str:
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


def _write_not_run(reporter, not_run: dict[str, list[str]]) -> None:
    by_reason = Counter(reason for reasons in not_run.values() for reason in reasons)
    reporter.write_sep("=", "det-suite: not run")
    reporter.write_line(f"{len(not_run)} test(s) skipped by det-suite markers: not run, "
                        "not passed")
    width = max(len(reason.split(":", 1)[0]) for reason in by_reason)
    for reason, count in sorted(by_reason.items()):
        marker, why = reason.split(": ", 1)
        reporter.write_line(f"  {marker:<{width}}  {count:>4}  {why}")


def _tests(count: int) -> str:
    return f"{count} test" if count == 1 else f"{count} tests"


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
    return (f"; {_tests(len(verdict.other_marker))} skipped for markers not required "
            f"({', '.join(names)}), see \"det-suite: not run\"")


def _write_required(reporter, settings: Settings, verdict: Verdict, exitstatus,
                    set_by_require: bool) -> None:
    names = ",".join(settings.require)
    machine = _machine_text(hardware.current())
    if verdict.met:
        if verdict.failed:
            ran = (f"{_tests(verdict.passed + verdict.failed)} ran on {machine}: "
                   f"{verdict.passed} passed, {verdict.failed} failed (failures fail the run)")
        else:
            ran = f"{_tests(verdict.passed)} ran and passed on {machine}"
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


def _failing_exit_text(exitstatus, set_by_require: bool) -> str:
    # pytest_terminal_summary gets the exit status from before pytest_sessionfinish.
    if set_by_require:
        return "the run fails: exit code 1, set by --det-require (nothing else failed)"
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        return "the run fails: exit code 5 (no tests collected), as pytest reports it"
    if exitstatus == pytest.ExitCode.TESTS_FAILED:
        return "the run fails: exit code 1 (tests failed as well)"
    return f"the run fails: exit code {int(exitstatus)}"


def _write_diagnostic(reporter, family: str, ran: list[tuple[str, str]]) -> None:
    reporter.write_sep("=", f"DIAGNOSTIC (not a pass on {family} hardware)", yellow=True)
    for nodeid, outcome in ran:
        reporter.write_line(f"  {outcome.upper():<7} {nodeid}")
