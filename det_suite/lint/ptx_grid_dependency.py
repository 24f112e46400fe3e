"""Does a PTX listing wait for the previous grid before it touches global memory?

A kernel launched with programmatic dependent launch (PDL) may start while the kernel before
it on the stream is still running. It must execute `griddepcontrol.wait` before it reads
what that kernel wrote (its input, a bias, the split-K arrival counters) or writes what that
kernel may still read or write (its output, the workspace). On the GPU a missing wait is a
race that shows only when the timing is unlucky; in the PTX it is plain to see, so the lint
checks it for every PDL variant on a CPU, for every target.

An L2 prefetch (`prefetch.global.L2`) is not an access: it moves a line into L2, which is
coherent for the whole GPU, and nothing into the program, so it can neither read a value
the previous grid has yet to write nor be overtaken by one. A GEMM tile with `prefetch_k`
issues its weight's prefetches before the wait on purpose (`kernels/l2_prefetch.py`); they
are counted, so the lint can show the tile's prefetch compiled where it was meant to.

Pure text processing, like `det_suite.lint.ptx_instructions`. Listing order stands in for
execution order: det-suite's kernels wait in their first statement, before any branch, so a
global access that appears before the wait in the text is one the program may execute
before it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from det_suite.lint.ptx_instructions import statements

WAIT = "griddepcontrol.wait"
# Statements that may read or write global memory. Generic-space ld/st/atom/red count too
# (Triton addresses global tensors through generic pointers in some lowerings); cp.async
# (Ampere) and cp.async.bulk (TMA) read global memory into shared memory. Their group
# bookkeeping (commit_group / wait_group) touches no memory.
_ACCESS_PREFIXES = ("ld.", "st.", "atom.", "red.", "cp.async.", "cp.reduce.async.")
_NOT_GLOBAL = (".shared", ".param", ".local", ".const")
_BOOKKEEPING = ("commit_group", "wait_group", "wait_all", "mbarrier")
_PREDICATE_RE = re.compile(r"^@!?%\w+\s+")
# What may precede an instruction inside one ';'-separated statement: labels, braces.
_LEADING_RE = re.compile(r"^(?:\s*(?:[$\w]+:|[{}]))+\s*")
_WAIT_RE = re.compile(r"(?<![\w.])griddepcontrol\.wait\b")
_LAUNCH_RE = re.compile(r"(?<![\w.])griddepcontrol\.launch_dependents\b")
_L2_PREFETCH_RE = re.compile(r"(?<![\w.])prefetch\.global\.L2\b")


@dataclass(frozen=True)
class GridDependencyOrder:
    """Where a listing waits for the previous grid, relative to its global memory accesses."""

    waits: bool                      # holds griddepcontrol.wait
    launches_dependents: bool        # holds griddepcontrol.launch_dependents
    first_access: str | None         # the first global memory statement
    access_before_wait: str | None   # a global access listed before the first wait
    l2_prefetches_before_wait: int = 0  # prefetch.global.L2 statements before the first wait
    releases_before_wait: bool = False  # launch_dependents before the first wait (RELEASE_FIRST)

    @property
    def waits_first(self) -> bool:
        return self.waits and self.access_before_wait is None

    def describe(self) -> str:
        if not self.waits:
            return (f"no {WAIT} anywhere" + (f" (first access: {self.first_access})"
                                             if self.first_access else ""))
        if self.access_before_wait:
            return f"'{self.access_before_wait}' before {WAIT}"
        prefetched = (f", after {self.l2_prefetches_before_wait} L2 prefetch statements"
                      if self.l2_prefetches_before_wait else "")
        return f"{WAIT} before every global access{prefetched}"

    def to_dict(self) -> dict:
        return asdict(self)


def global_access(statement: str) -> str | None:
    """The statement, condensed, when it may access global memory; else None."""
    text = _PREDICATE_RE.sub("", _LEADING_RE.sub("", " ".join(statement.split())))
    opcode = text.split(" ", 1)[0]
    if not opcode.startswith(_ACCESS_PREFIXES) or any(b in opcode for b in _BOOKKEEPING):
        return None
    if opcode.startswith(("cp.async", "cp.reduce.async")):
        # The copy engines' destination is shared memory; the source says global.
        return text[:120] if ".global" in opcode or opcode.startswith("cp.async.bulk.tensor") \
            or opcode.startswith("cp.reduce.async") else None
    if any(space in opcode for space in _NOT_GLOBAL):
        return None
    return text[:120]


def grid_dependency_order(ptx: str) -> GridDependencyOrder:
    first_access = None
    before_wait = None
    waited = False
    launches = False
    prefetches = 0
    released_early = False
    for statement in statements(ptx):
        text = statement.strip()
        if _WAIT_RE.search(text):
            waited = True
            continue
        if _LAUNCH_RE.search(text):
            launches = True
            released_early = released_early or not waited
            continue
        if _L2_PREFETCH_RE.search(text):
            prefetches += 0 if waited else 1
            continue
        access = global_access(text)
        if access is None:
            continue
        if first_access is None:
            first_access = access
        if not waited and before_wait is None:
            before_wait = access
    return GridDependencyOrder(waits=waited, launches_dependents=launches,
                               first_access=first_access,
                               access_before_wait=before_wait if waited else first_access,
                               l2_prefetches_before_wait=prefetches if waited else 0,
                               releases_before_wait=released_early and waited)
