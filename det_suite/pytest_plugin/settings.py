"""The plugin's command-line options, checked as they are parsed, and what a run decides
from them at configure time (`Settings`)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import pytest

from det_suite.platform import family as arch
from det_suite.pytest_plugin.markers import MARKERS


@dataclass(frozen=True)
class Settings:
    """What a run decided at configure time; requirements read it with the snapshot."""

    run_slow: bool
    run_perf: bool
    arch_as: str | None        # forced tile family, None outside diagnosis mode
    arch_as_source: str | None  # "--det-arch-as" or "DET_SUITE_ARCH"
    require: tuple[str, ...]
    markexpr: str = ""         # -m, to say "excluded by -m EXPR"


def family_argument(value: str) -> str:
    if value not in arch.KNOWN_FAMILIES:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a GPU family with a tile table; expected one of "
            f"{', '.join(arch.KNOWN_FAMILIES)}")
    return value


def marker_list_argument(value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in MARKERS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{value!r} must be a comma-separated list of det-suite markers "
            f"({', '.join(MARKERS)}); unknown: {', '.join(unknown) or '(empty list)'}")
    return names


def add_options(parser) -> None:
    group = parser.getgroup("det-suite", "det-suite hardware markers")
    group.addoption("--run-slow", action="store_true", default=False,
                    help="run tests marked slow (they run anyway when a GPU is present)")
    group.addoption("--run-perf", action="store_true", default=False,
                    help="run tests marked perf (they still need a GPU)")
    group.addoption("--det-arch-as", metavar="FAMILY", type=family_argument, default=None,
                    help="diagnosis mode: use FAMILY's tile table (sets DET_SUITE_ARCH) and "
                         "run FAMILY's arch-marked tests on the GPU present; results are "
                         "labelled DIAGNOSTIC, never passes on FAMILY hardware. One of "
                         + ", ".join(arch.KNOWN_FAMILIES))
    group.addoption("--det-require", metavar="MARKERS", type=marker_list_argument,
                    default=(),
                    help="comma-separated markers whose tests must run here: the run "
                         "fails (exit code 1) unless, for each marker, at least one test "
                         "carrying it was collected and every such test was selected (not "
                         "deselected, not excluded by -m) and ran (not skipped, not "
                         "xfailed) on this machine's own hardware, outside diagnosis mode; "
                         "a test failure fails the run by itself, and a test skipped only "
                         "for a marker that is not required is left out")


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


def settings_of(config) -> Settings:
    """The run's settings; DET_SUITE_ARCH already in the environment is diagnosis mode too
    (an invalid value is a usage error)."""
    arch_as, source = _resolve_arch_as(config)
    return Settings(run_slow=config.getoption("run_slow"),
                    run_perf=config.getoption("run_perf"),
                    arch_as=arch_as, arch_as_source=source,
                    require=tuple(config.getoption("det_require")),
                    markexpr=config.getoption("markexpr") or "")
