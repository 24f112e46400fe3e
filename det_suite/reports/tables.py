"""Tables as text: one Markdown and one aligned plain-text renderer for every report."""

from __future__ import annotations

from typing import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table; '|' inside a cell is escaped."""
    esc = lambda cell: str(cell).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(map(esc, header)) + " |",
           "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(map(esc, row)) + " |" for row in rows]
    return "\n".join(out)


def text_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell, a dashed rule under the header."""
    rows = [list(map(str, row)) for row in rows]
    header = list(map(str, header))
    widths = [max(len(c) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
