"""Finding the results a report is made of: files (`.json` or `.json.gz`) or folders
searched for them; each read, classified (`kinds.kind_of`) and kept with the plots that
sit beside it."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from det_suite.reports.repro.kinds import PARTS, kind_of

SUFFIXES = (".json", ".json.gz")
# Folders a search never enters: what a result keeps beside itself, not results.
SKIP_DIRS = {"boots", "logs", "__pycache__", ".git"}


class ReportInputError(ValueError):
    """An input that cannot be used: missing, unreadable, or no result in it."""


@dataclass
class ResultFile:
    path: Path
    kind: str
    data: dict
    plots: list[Path] = field(default_factory=list)


def read_json(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _candidates(folder: Path) -> list[Path]:
    found = []
    for path in sorted(folder.rglob("*")):
        if any(part in SKIP_DIRS for part in path.relative_to(folder).parts[:-1]):
            continue
        if path.is_file() and path.name.endswith(SUFFIXES) and not path.name.startswith("."):
            found.append(path)
    return found


def _stem(path: Path) -> str:
    name = path.name
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return path.stem


def _plots(path: Path) -> list[Path]:
    """The PNGs a result wrote beside itself: named after it (invariance.json ->
    invariance_heatmap.png, e2e.json -> e2e_samples.png)."""
    stem = _stem(path)
    return sorted(p for p in path.parent.glob(f"{stem}*.png") if p.is_file())


def load_inputs(paths) -> tuple[list[ResultFile], list[str]]:
    """(results, notes). A file named explicitly must be a result (else ReportInputError);
    in a folder, JSON that is no check's result is passed over with a note."""
    results, notes, seen = [], [], set()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ReportInputError(f"inputs: {path} does not exist")
        explicit = path.is_file()
        for candidate in ([path] if explicit else _candidates(path)):
            resolved = candidate.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            try:
                data = read_json(candidate)
            except (OSError, ValueError, EOFError) as exc:
                if explicit:
                    raise ReportInputError(f"inputs: {candidate}: not readable JSON "
                                           f"({type(exc).__name__}: {exc})") from None
                notes.append(f"passed over {candidate}: not readable JSON")
                continue
            kind = kind_of(data)
            if kind is None:
                if explicit:
                    raise ReportInputError(f"inputs: {candidate}: not a det-suite result (no "
                                           "kind or schema field, and no known layout)")
                if not (isinstance(data, dict) and str(data.get("schema", "")).startswith(PARTS)):
                    notes.append(f"passed over {candidate}: not a check's result")
                continue
            results.append(ResultFile(candidate, kind, data, _plots(candidate)))
    if not results:
        raise ReportInputError("inputs: no det-suite result found in "
                               + ", ".join(str(p) for p in paths))
    return results, notes
