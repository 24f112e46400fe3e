"""Progress bars that suit where stderr goes: tqdm's bar on a terminal; in a CI log (stderr
not a terminal) a plain line every PLAIN_INTERVAL_S seconds instead of thousands of `\\r`
frames.

tqdm does the counting and rate-limiting itself (`mininterval`); `_Lines` only turns each
frame tqdm writes into a line of its own.
"""

from __future__ import annotations

import sys

PLAIN_INTERVAL_S = 10.0   # a CI log gets a progress line at most this often


class _Lines:
    """A file for tqdm that writes each `\\r`-led frame as one line (blank frames, tqdm's
    way of erasing a bar, are dropped)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        for frame in text.replace("\n", "\r").split("\r"):
            if frame.strip():
                self.stream.write(frame.rstrip() + "\n")

    def flush(self) -> None:
        self.stream.flush()


def is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):   # closed or not a real stream
        return False


def progress_bar(*, file=None, **kwargs):
    """tqdm(**kwargs) on `file` (default stderr): a live bar on a terminal, else plain lines
    at most every PLAIN_INTERVAL_S seconds (and the final count)."""
    from tqdm import tqdm

    stream = file or sys.stderr
    if is_terminal(stream):
        return tqdm(file=stream, dynamic_ncols=True, **kwargs)
    kwargs.pop("dynamic_ncols", None)
    return tqdm(file=_Lines(stream), mininterval=PLAIN_INTERVAL_S, maxinterval=PLAIN_INTERVAL_S,
                ncols=100, **{k: v for k, v in kwargs.items() if k != "leave"}, leave=True)
