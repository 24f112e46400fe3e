"""The GSM8K fixture file: one run's per-row hashes, answers and token ids, with what the run
was (key, policy, settings) and what produced it (environment).

A run result and a fixture are the same document (`kind` "gsm8k", `schema` SCHEMA); a
fixture is a run written under fixtures/gsm8k/ without output texts. Per row:

  row, question_sha256, prompt_sha256 (the prompt's token ids), prompt_tokens,
  text_sha256 (the output text, UTF-8), tokens_sha256 (the output ids, `sha256_ids`),
  token_ids (kept so a check can name the first token that differs), stopped (a stop id
  ended the output), answer, answer_source, reference, correct; `text` in run results.

Rows are written one per line so a diff of two fixtures reads row by row. `read_fixture`
validates the schema and that each row's tokens_sha256 is the hash of its own token_ids.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from det_suite.errors import InputError
from det_suite.gsm8k.identity import model_slug, sha256_ids, sha256_text

KIND = "gsm8k"
SCHEMA = "det-suite/gsm8k-fixture/1"
TOP_FIELDS = ("kind", "schema", "key", "policy", "settings", "summary", "rows", "environment")
KEY_FIELDS = ("model", "backend", "mode", "platform", "stack")
ROW_FIELDS = {"row": int, "question_sha256": str, "prompt_sha256": str, "prompt_tokens": int,
              "text_sha256": str, "tokens_sha256": str, "token_ids": list, "stopped": bool,
              "answer": (str, type(None)), "answer_source": str, "reference": str,
              "correct": bool}
HASH_FIELDS = ("question_sha256", "prompt_sha256", "text_sha256", "tokens_sha256")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ROWS_MARK = "__det_suite_rows__"


class FixtureError(ValueError):
    """A fixture file that is not a valid GSM8K fixture (names the file and the field)."""


class FixtureMissing(FixtureError, InputError):
    """No file at the fixture's path: bad input (exit 2), not a failed check."""


def output_row(*, row: int, question: str, prompt: tuple[int, ...], text: str,
               token_ids: tuple[int, ...], stopped: bool, answer, reference: str,
               keep_text: bool) -> dict:
    """One row of a fixture; `answer` is an answers.Extracted."""
    from det_suite.gsm8k.answers import is_correct

    out = {"row": row, "question_sha256": sha256_text(question),
           "prompt_sha256": sha256_ids(prompt), "prompt_tokens": len(prompt),
           "text_sha256": sha256_text(text), "tokens_sha256": sha256_ids(token_ids),
           "token_ids": list(token_ids), "stopped": stopped, "answer": answer.value,
           "answer_source": answer.source, "reference": reference,
           "correct": is_correct(answer, reference)}
    if keep_text:
        out["text"] = text
    return out


def summarize(rows: list[dict]) -> dict:
    from det_suite.gsm8k.answers import SOURCES

    correct = sum(r["correct"] for r in rows)
    return {"rows": len(rows), "correct": correct,
            "accuracy": correct / len(rows) if rows else None,
            "answers": {s: sum(r["answer_source"] == s for r in rows) for s in SOURCES},
            "stopped": sum(r["stopped"] for r in rows),
            "output_tokens": sum(len(r["token_ids"]) for r in rows)}


def dumps(payload: dict) -> str:
    """JSON, indented, with each row on one line."""
    rows = payload["rows"]
    text = json.dumps({**payload, "rows": _ROWS_MARK}, indent=2, default=str)
    lines = ",\n".join("    " + json.dumps(r, ensure_ascii=False, separators=(", ", ": "))
                       for r in rows)
    return text.replace(f'"{_ROWS_MARK}"', "[\n" + lines + "\n  ]" if rows else "[]") + "\n"


def write_fixture(path, payload: dict) -> Path:
    """Validate `payload` and write it atomically."""
    from det_suite.reports.files import write_text_atomic

    validate(payload, str(path))
    return write_text_atomic(path, dumps(payload))


def _fail(where: str, message: str):
    raise FixtureError(f"{where}: {message}")


def _validate_row(row, where: str) -> None:
    if not isinstance(row, dict):
        _fail(where, f"expected an object, got {type(row).__name__}")
    for name, kind in ROW_FIELDS.items():
        if name not in row:
            _fail(where, f"missing field {name!r}")
        if not isinstance(row[name], kind) or (kind is int and isinstance(row[name], bool)):
            _fail(where, f"{name}: expected {getattr(kind, '__name__', kind)}, got "
                         f"{type(row[name]).__name__}")
    for name in HASH_FIELDS:
        if not _HEX64.match(row[name]):
            _fail(where, f"{name}: expected 64 lowercase hex digits, got {row[name]!r}")
    ids = row["token_ids"]
    if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids):
        _fail(where, "token_ids: expected non-negative ints")
    if sha256_ids(ids) != row["tokens_sha256"]:
        _fail(where, f"tokens_sha256 {row['tokens_sha256'][:12]}... is not the hash of its "
                     f"own token_ids ({sha256_ids(ids)[:12]}...): the fixture was edited or "
                     "is corrupt")
    if "text" in row and sha256_text(row["text"]) != row["text_sha256"]:
        _fail(where, "text_sha256 is not the hash of its own text: edited or corrupt")


def validate(payload, where: str) -> dict:
    if not isinstance(payload, dict):
        _fail(where, "expected a JSON object")
    if payload.get("kind") != KIND:
        _fail(where, f"kind: expected {KIND!r}, got {payload.get('kind')!r}")
    if payload.get("schema") != SCHEMA:
        _fail(where, f"schema: expected {SCHEMA!r} (this det-suite's version), got "
                     f"{payload.get('schema')!r}")
    missing = [f for f in TOP_FIELDS if f not in payload]
    if missing:
        _fail(where, f"missing fields {missing}")
    key = payload["key"]
    if not isinstance(key, dict) or any(f not in key for f in KEY_FIELDS):
        _fail(where, f"key: expected an object with {list(KEY_FIELDS)}")
    if not isinstance(payload["rows"], list) or not payload["rows"]:
        _fail(where, "rows: expected a non-empty list")
    seen = set()
    for i, row in enumerate(payload["rows"]):
        label = f"{where}: row {row.get('row', f'#{i}') if isinstance(row, dict) else f'#{i}'}"
        _validate_row(row, label)
        if row["row"] in seen:
            _fail(label, "appears twice")
        seen.add(row["row"])
    return payload


def read_fixture(path) -> dict:
    path = Path(path)
    try:
        payload = json.loads(path.read_text())
    except FileNotFoundError:
        raise FixtureMissing(f"{path}: no such fixture file") from None
    except json.JSONDecodeError as error:
        raise FixtureError(f"{path}: not JSON ({error})") from None
    return validate(payload, str(path))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(text)).strip("-")


def fixture_name(key: dict) -> str:
    """`<backend>-<mode>__<platform>__<stack>.json`, e.g.
    embedded-det__sm90__torch-2.11.0+cu130_triton-3.6.0.json."""
    platform = key["platform"]
    where = platform["gpu_family"] or ("cpu-interpreter" if platform["interpreter"] else "cpu")
    stack = "_".join(f"{name}-{_slug(value)}" for name, value in key["stack"].items()
                     if value is not None and name != "torch_cuda")
    return f"{key['backend']}-{key['mode']}__{where}__{stack}.json"


def fixture_path(folder, key: dict) -> Path:
    """fixtures/gsm8k/<model>/<fixture_name>."""
    return Path(folder) / model_slug(key["model"]) / fixture_name(key)


def fixtures_in(folder) -> list[Path]:
    return sorted(Path(folder).rglob("*.json")) if Path(folder).is_dir() else []
