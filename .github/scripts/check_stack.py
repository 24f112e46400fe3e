"""Check that a runner's installed stack is the one a tox env is named after.

    python check_stack.py sglang==0.5.23 torch==2.14.1 triton==3.8.0
    python check_stack.py --nightly torch triton

Each argument is a requirement (PEP 508, e.g. `torch==2.14.1`, which a local build
`2.14.1+cu130` satisfies); a bare name only has to be installed. --nightly also requires the
first one to be a development build. Prints one line per distribution; exits 1 naming every
mismatch, so a GPU env on the wrong runner stops before its tests run.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

from packaging.requirements import Requirement
from packaging.version import Version


def check(requirements: list[str], nightly: bool = False) -> list[str]:
    """Problems found, one sentence each; empty when the stack matches."""
    problems = []
    for i, text in enumerate(requirements):
        req = Requirement(text)
        try:
            found = version(req.name)
        except PackageNotFoundError:
            problems.append(f"{req.name} is not installed (expected {text})")
            continue
        print(f"{req.name} {found}")
        if req.specifier and not req.specifier.contains(found, prereleases=True):
            problems.append(f"{req.name} {found} installed, expected {text}")
        if nightly and i == 0 and not Version(found).is_devrelease:
            problems.append(f"{req.name} {found} is not a nightly (.dev) build")
    return problems


def main(argv: list[str]) -> int:
    nightly = "--nightly" in argv
    requirements = [a for a in argv if a != "--nightly"]
    if not requirements:
        print("usage: check_stack.py [--nightly] REQUIREMENT...", file=sys.stderr)
        return 2
    problems = check(requirements, nightly)
    for problem in problems:
        print(f"check_stack: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
