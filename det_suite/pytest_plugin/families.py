"""Per-family selection: ``pytest -m sm120`` selects everything that must pass on SM12x,
``-m sm90`` everything that must pass on Hopper.

Three kinds of test belong to a family's selection:

* a test that needs the family's hardware carries the arch marker itself (``sm120``); the
  kernel-level GPU suite gets it per case from `family_cases`, which parametrizes a test
  over the families with ``gpu`` + the arch marker on each family's cases, so an H200 runs
  the sm90 cases and skips the sm120 ones with a reason;
* a test parametrized over ``family`` (a CPU lint of the sm_120 target, a CPU check of the
  sm90 table) is about that family but needs no GPU: `add_family_selection` gives each case
  a selection-only mark of its family (``sm120(hardware=False)``, see `markers.needs`);
* a family-agnostic GPU or model test (``gpu``, ``fp8``, ``graph``, ``model`` and no arch
  marker) must pass on every family: it gets a selection-only mark of each.

A selection-only mark never skips a test and ``--det-require`` does not count it: a
required family is met only by tests that ran on that family's hardware.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import pytest

from det_suite.pytest_plugin.markers import ARCH_MARKERS, HARDWARE_KEYWORD

# The families a GPU test is parametrized over; each one's arch marker has its name.
FAMILIES = ARCH_MARKERS
# The parameter whose value names the family a test is about.
FAMILY_PARAMETER = "family"
# Markers of a test that must pass on any family when it carries no arch marker.
FAMILY_AGNOSTIC_MARKERS = ("gpu", "fp8", "graph", "model")


def family_cases(cases: Iterable[tuple[str, Sequence]], *, marks: Sequence = (),
                 families: Sequence[str] = FAMILIES) -> list:
    """One ``pytest.param(family, *values)`` per family and case, id ``FAMILY-CASE_ID``,
    marked ``gpu``, the family's arch marker and `marks`: for
    ``@pytest.mark.parametrize("family, a, b", family_cases(...))``."""
    cases = list(cases)
    unknown = [family for family in families if family not in FAMILIES]
    if unknown:
        raise ValueError(f"families={list(families)!r}: {unknown} have no arch marker; "
                         f"expected a subset of {', '.join(FAMILIES)}")
    params = []
    for family in families:
        family_marks = [pytest.mark.gpu, getattr(pytest.mark, family), *marks]
        for case_id, values in cases:
            params.append(pytest.param(family, *values, id=f"{family}-{case_id}",
                                       marks=family_marks))
    return params


def _family_of_parameters(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    family = callspec.params.get(FAMILY_PARAMETER) if callspec is not None else None
    return family if isinstance(family, str) and family in FAMILIES else None


def selected_families(item) -> tuple[str, ...]:
    """The families whose selection `item` joins without needing their hardware."""
    carried = {marker for marker in FAMILIES if item.get_closest_marker(marker) is not None}
    family = _family_of_parameters(item)
    if family is not None:
        wanted = {family}
    elif not carried and any(item.get_closest_marker(marker) is not None
                             for marker in FAMILY_AGNOSTIC_MARKERS):
        wanted = set(FAMILIES)
    else:
        wanted = set()
    return tuple(marker for marker in FAMILIES if marker in wanted - carried)


def add_family_selection(item) -> None:
    """Give `item` a selection-only arch mark for each family it belongs to
    (`selected_families`); runs before -m deselects."""
    for family in selected_families(item):
        item.add_marker(getattr(pytest.mark, family)(**{HARDWARE_KEYWORD: False}))
