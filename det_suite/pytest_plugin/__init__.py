"""det-suite's pytest plugin: markers, options, hardware auto-skip, honest reporting.

This module holds the hooks pytest calls on the plugin itself, and nothing else; what they
decide lives beside it:

=============  ==================================================================
`markers`      the markers, what each needs of the machine, the skip and its record
`settings`     the options (checked as parsed) and the run's `Settings`
`state`        `RunState`: one run's hooks and bookkeeping, xdist included
`verdict`      the ``--det-require`` judgement (`Seen`, `Verdict`, `judge`)
`summary`      the header and the terminal summary's text
`families`     per-family selection: ``-m sm120`` picks what must pass on SM12x
`comparisons`  the ``bit_exact`` fixture's counting ``torch.equal``
=============  ==================================================================

Loading
-------
The primary way is the pytest11 entry point ``det_suite`` (pyproject.toml): once the package
is installed (``pip install -e .[test]``, as tox and CI do) every pytest run loads it, and no
tests/conftest.py is needed. Without an install, load it explicitly:
``pytest -p det_suite.pytest_plugin``. With the package installed, ``-p det_suite`` (the
entry-point name) also works.

Both at once (installed *and* ``-p det_suite.pytest_plugin``) is safe. pytest registers
``-p`` plugins before it autoloads entry points, so this module is first registered under its
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
* At import, with no CUDA device and TRITON_INTERPRET unset, sets TRITON_INTERPRET=1
  (`det_suite.platform.interpreter.default_to_interpreter`) so kernels imported by
  conftests and test modules run on Triton's interpreter; the report header says so.
  Whenever the interpreter is active, the interpreter switch has made it GPU-faithful
  for the whole process (`det_suite.platform.gpu_faithful_interpreter`); the header says
  that too.
* Markers (registered, so ``--strict-markers`` holds) skip a test whose needs this machine
  doesn't meet, with a reason naming what is needed and what was found (`markers`). Each
  skip also records a ``det_suite_not_run`` user property (it reaches junit XML and
  survives xdist), and the terminal summary counts them per marker under "det-suite: not
  run": a skipped GPU test is not run, never passed.
* ``--det-arch-as=FAMILY`` (or DET_SUITE_ARCH already in the environment) is diagnosis mode:
  every kernel uses FAMILY's tile table, FAMILY's arch-marked tests run on whatever GPU is
  present, tests marked for another family skip (they would test FAMILY's table, not
  theirs), and every GPU test that ran under a table foreign to the GPU gets the user
  property ``diagnostic_arch_as`` and is listed under "DIAGNOSTIC (not a pass on FAMILY
  hardware)".
* ``--det-require=MARKER[,MARKER]`` makes a run that did not test MARKER fail (exit code 1
  when the run is otherwise green): every collected test carrying MARKER must have been
  selected, run and passed (or failed) on the real hardware; `verdict` has the rule and
  its one exception, `state` how it is judged under pytest-xdist. When met, the summary
  says "det-suite: --det-require=M: met: N tests ran and passed on MACHINE".
  ``--collect-only`` runs nothing, so the requirement is not checked.
* Per-family selection (`families`): ``-m sm120`` / ``-m sm90`` select every test that must
  pass on that family; tests about a family that need no GPU, and family-agnostic GPU or
  model tests, get selection-only arch marks (``sm120(hardware=False)``), which never skip
  and which ``--det-require`` does not count.
* The ``bit_exact`` fixture compares tensors with ``torch.equal`` and counts; the summary
  says "det-suite: N bit-exact comparisons (torch.equal) in T tests", summed over xdist
  workers.
* Exit code 5 (no tests collected) is left as pytest reports it, with or without
  ``--det-require``: an empty run stays a failure by code 5.
"""

from __future__ import annotations

import sys

import pytest

from det_suite.platform import gpu_faithful_interpreter, hardware
from det_suite.platform.interpreter import default_to_interpreter, interpreter_active
from det_suite.pytest_plugin import comparisons, markers, settings, summary
from det_suite.pytest_plugin.state import RunState

ENTRY_POINT_NAME = "det_suite"
SESSION_PLUGIN_NAME = "det_suite_session"

# Without a GPU, kernels can only run on the interpreter: chosen before any test module
# imports a kernel (triton.jit reads the variable when a kernel is defined). Import runs
# once per process, however many pytest sessions (pytester) follow.
INTERPRETER_SET_BY_PLUGIN = default_to_interpreter()


# ------------------------------------------------------------------ double-load guard

def pytest_plugin_registered(plugin, plugin_name, manager) -> None:
    if plugin is sys.modules[__name__] and plugin_name != ENTRY_POINT_NAME:
        # Registered by -p under the module name: stop autoload registering it again.
        manager.set_blocked(ENTRY_POINT_NAME)


# ------------------------------------------------------------------ fixtures

@pytest.fixture
def bit_exact(request):
    """``bit_exact(test, reference) -> bool``: ``torch.equal``, counted for the summary."""
    comparer = comparisons.BitExact()
    yield comparer
    if comparer.count:
        request.node.user_properties.append((comparisons.PROPERTY, comparer.count))


# ------------------------------------------------------------------ options and configure

def pytest_addoption(parser) -> None:
    settings.add_options(parser)


def pytest_configure(config) -> None:
    markers.register(config)
    config.pluginmanager.register(RunState(settings.settings_of(config)), SESSION_PLUGIN_NAME)


def pytest_report_header(config) -> list[str]:
    state = config.pluginmanager.get_plugin(SESSION_PLUGIN_NAME)
    return summary.header_lines(
        hardware.current(), state.settings, interpreter_set_here=INTERPRETER_SET_BY_PLUGIN,
        gpu_faithful=interpreter_active() and gpu_faithful_interpreter.installed())


def pytest_unconfigure(config) -> None:
    state = config.pluginmanager.get_plugin(SESSION_PLUGIN_NAME)
    if state is not None:
        state.restore_environment()
        config.pluginmanager.unregister(state, SESSION_PLUGIN_NAME)
