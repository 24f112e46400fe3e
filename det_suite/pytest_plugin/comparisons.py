"""Counting bit-exact comparisons: the ``bit_exact`` fixture's comparer.

A test compares tensors with ``bit_exact(a, b)`` (``torch.equal``, never a tolerance); at
teardown the fixture records how many it made as the user property `PROPERTY`, which
reaches junit XML and travels with the report to the xdist controller, where `RunState`
sums it for the terminal summary's "det-suite: N bit-exact comparisons" line.
"""

from __future__ import annotations

import torch

PROPERTY = "det_suite_bit_exact"


class BitExact:
    """``torch.equal`` that counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, test: torch.Tensor, reference: torch.Tensor) -> bool:
        if not isinstance(test, torch.Tensor) or not isinstance(reference, torch.Tensor):
            raise TypeError(f"bit_exact compares two tensors; got {type(test).__name__} and "
                            f"{type(reference).__name__}")
        self.count += 1
        return torch.equal(test, reference)


def recorded(report) -> int:
    """The comparisons one report's test recorded (its teardown report carries them)."""
    if report.when != "teardown":
        return 0
    return sum(value for name, value in report.user_properties if name == PROPERTY)
