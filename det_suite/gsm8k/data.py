"""GSM8K rows through `datasets`, from one of three sources named by one string:

- `synthetic` or `synthetic?seed=S&size=N`: det-suite's generated GSM8K-schema set
  (`gsm8k.synthetic`), written as JSON lines into a temporary folder and then read exactly
  like a local file (the offline default);
- a local file (.jsonl/.json/.parquet/.csv/.arrow: the file is the split) or folder (a copy
  of the hub repository, `main/test-*.parquet`, or any folder `datasets` can read with a
  `<split>` file in it);
- a hub id such as `openai/gsm8k` (config `main`, split `test`): downloaded, or from the
  local `datasets` cache when the runner is offline (HF_DATASETS_OFFLINE=1, or HF_HUB_OFFLINE=1).

Every source must have GSM8K's schema: a `question` string and an `answer` string ending in
`#### <number>`.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from det_suite.gsm8k.answers import reference_answer
from det_suite.gsm8k.synthetic import DEFAULT_SIZE, write_synthetic_jsonl

SYNTHETIC = "synthetic"
HUB_DEFAULT = "openai/gsm8k"
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv",
                 ".arrow": "arrow"}
COLUMNS = ("question", "answer")


@dataclass(frozen=True)
class DataSource:
    kind: str                   # "synthetic", "local" or "hub"
    spec: str                   # what the user passed
    config: str = "main"        # hub config / sub-folder of a local copy
    split: str = "test"
    seed: int | None = None     # synthetic only
    size: int | None = None     # synthetic only

    def describe(self) -> dict:
        out = {"kind": self.kind, "spec": self.spec, "split": self.split}
        if self.kind == "synthetic":
            out.update(seed=self.seed, size=self.size)
        else:
            out["config"] = self.config
        return out


@dataclass(frozen=True)
class Problem:
    row: int            # index in the split
    question: str
    answer: str         # the reference solution, as in the data
    reference: str      # its final number (answers.reference_answer)


def _synthetic_source(spec: str, split: str) -> DataSource:
    query = parse_qs(urlsplit(spec).query, keep_blank_values=True)
    unknown = sorted(set(query) - {"seed", "size"})
    values = {}
    for name, default in (("seed", 0), ("size", DEFAULT_SIZE)):
        given = query.get(name, [str(default)])
        if unknown or len(given) != 1 or not given[0].isdigit():
            raise ValueError(f"data {spec!r}: expected 'synthetic' or "
                             "'synthetic?seed=S&size=N' with non-negative integers")
        values[name] = int(given[0])
    if values["size"] < 1:
        raise ValueError(f"data {spec!r}: size must be >= 1")
    return DataSource("synthetic", spec, split=split, **values)


def parse_source(spec: str, *, config: str = "main", split: str = "test") -> DataSource:
    """The data source a `--data` string names (see the module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"data: expected 'synthetic', a local file or folder, or a hub id, "
                         f"got {spec!r}")
    if spec == SYNTHETIC or spec.startswith(SYNTHETIC + "?"):
        return _synthetic_source(spec, split)
    path = Path(spec).expanduser()
    if path.exists():
        if path.is_file() and path.suffix not in FILE_BUILDERS:
            raise ValueError(f"data {spec!r}: expected a file ending in "
                             f"{', '.join(FILE_BUILDERS)}, or a folder")
        return DataSource("local", spec, config=config, split=split)
    owner, _, name = spec.partition("/")
    if owner and name and "/" not in name:
        return DataSource("hub", spec, config=config, split=split)
    raise ValueError(f"data {spec!r}: no such file or folder, and not a hub id (owner/name) or "
                     "'synthetic'")


def _load_local(path: Path, source: DataSource, **kwargs):
    from datasets import load_dataset

    if path.is_file():
        return load_dataset(FILE_BUILDERS[path.suffix], data_files={source.split: str(path)},
                            split=source.split, **kwargs)
    data_dir = source.config if (path / source.config).is_dir() else None
    return load_dataset(str(path), data_dir=data_dir, split=source.split, **kwargs)


def load_split(source: DataSource, *, progress: bool = True):
    """The split as a `datasets.Dataset`, schema checked."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    if not progress:
        datasets.disable_progress_bars()
    try:
        if source.kind == "synthetic":
            with tempfile.TemporaryDirectory(prefix="det-suite-gsm8k-") as tmp:
                jsonl = write_synthetic_jsonl(Path(tmp) / f"{source.split}.jsonl",
                                              source.seed, source.size)
                dataset = _load_local(jsonl, source, cache_dir=str(Path(tmp) / "cache"),
                                      keep_in_memory=True)
        elif source.kind == "local":
            dataset = _load_local(Path(source.spec).expanduser(), source)
        else:
            try:
                dataset = datasets.load_dataset(source.spec, source.config, split=source.split)
            except Exception as error:  # network, missing cache, unknown config: say which
                raise ValueError(
                    f"data {source.spec!r} (config {source.config!r}, split {source.split!r}): "
                    f"could not be loaded from the hub or the local datasets cache "
                    f"({type(error).__name__}: {error}); offline, set HF_DATASETS_OFFLINE=1 "
                    "with a warm cache, pass a local file or folder, or use --data synthetic"
                ) from None
    finally:
        if not progress and not was_disabled:
            datasets.enable_progress_bars()
    missing = [c for c in COLUMNS if c not in dataset.column_names]
    if missing:
        raise ValueError(f"data {source.spec!r}: expected GSM8K's columns {list(COLUMNS)}, "
                         f"missing {missing} (has {dataset.column_names})")
    return dataset


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_rows(text: str) -> tuple[int, ...]:
    """'32-159' (inclusive) or '0,5,7-9' -> row indexes, in the order given, no repeats."""
    rows: list[int] = []
    for part in str(text).split(","):
        match = _RANGE.match(part)
        if not match:
            raise ValueError(f"rows: expected ranges like '32-159' or '0,5,7-9', got {text!r}")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            raise ValueError(f"rows: range {part.strip()!r} ends before it starts")
        rows.extend(range(first, last + 1))
    if len(set(rows)) != len(rows):
        raise ValueError(f"rows: {text!r} names a row more than once")
    return tuple(rows)


def select(dataset, rows, *, source: str = "data") -> list[Problem]:
    """Problems for `rows` of `dataset`, each reference answer parsed (ValueError naming the
    row when one is not GSM8K-schema)."""
    size = len(dataset)
    outside = [r for r in rows if not 0 <= r < size]
    if outside:
        raise ValueError(f"rows: {outside[:5]} outside {source}'s {size} rows")
    problems = []
    for row in rows:
        record = dataset[int(row)]
        question, answer = record["question"], record["answer"]
        if not isinstance(question, str) or not question:
            raise ValueError(f"{source} row {row}: question: expected a non-empty string")
        problems.append(Problem(row, question, answer,
                                reference_answer(answer, where=f"{source} row {row}: answer")))
    return problems
