"""The errors `cli.main` turns into exit codes, so every command means the same by each.

InputError: the input or the environment is wrong (a missing file, a truncated checkpoint,
a corrupt config): exit 2 with one line naming what and what was expected. It subclasses
ValueError so callers that already catch a ValueError for bad input keep working.
"""

from __future__ import annotations

EXIT_OK = 0            # the claim holds
EXIT_FAILED = 1        # the claim failed: a difference, an unflagged control
EXIT_INPUT = 2         # bad input or environment
EXIT_NOT_COMPARABLE = 3
EXIT_BUG = 4           # an uncaught exception: a det-suite bug
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C

BUG_LINE = ("this is a det-suite bug, please report it with the traceback above "
            "(and the command line)")


class InputError(ValueError):
    """Bad input or environment; the message names the argument or file and what was
    expected (one line, shown without a traceback unless --debug)."""
