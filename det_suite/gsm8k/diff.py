"""Row by row: a run against a fixture (or any two runs of the same work).

A row is exact when its output text hash and output token ids equal the other side's. When
they differ, the first differing token is named (index, and the two ids). Before outputs are
compared, the row's inputs are: a different question hash means the data set itself drifted;
a different prompt hash (same question) means the prompt changed: tokenizer, chat template
or prompt options. Either way the outputs no longer answer the same input, and the row is
reported as drifted rather than as an output difference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

STATUSES = ("exact", "differs", "question drifted", "prompt drifted", "missing", "extra")


def first_difference(a, b) -> int | None:
    """Index of the first position where sequences `a` and `b` differ (the shorter one's
    length when one is a prefix of the other), None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class RowDiff:
    row: int
    status: str                      # one of STATUSES
    first_token: int | None = None   # index of the first differing output token
    expected_token: int | None = None
    got_token: int | None = None
    expected_tokens: int | None = None
    got_tokens: int | None = None
    text_equal: bool | None = None
    tokens_equal: bool | None = None
    detail: str = ""

    @property
    def exact(self) -> bool:
        return self.status == "exact"

    def as_dict(self) -> dict:
        return asdict(self)


def _at(ids, index):
    return ids[index] if index is not None and index < len(ids) else None


def diff_row(expected: dict, got: dict, *, decode=None) -> RowDiff:
    """Compare one row of a run (`got`) with the fixture's (`expected`). `decode(ids) -> str`
    names the differing tokens' text in the detail when given."""
    row = expected["row"]
    if expected["question_sha256"] != got["question_sha256"]:
        return RowDiff(row, "question drifted",
                       detail=f"question hash {expected['question_sha256'][:12]} -> "
                              f"{got['question_sha256'][:12]}: the data set row changed")
    if expected["prompt_sha256"] != got["prompt_sha256"]:
        return RowDiff(row, "prompt drifted",
                       detail=f"same question, prompt ids hash {expected['prompt_sha256'][:12]}"
                              f" -> {got['prompt_sha256'][:12]} ({expected['prompt_tokens']} -> "
                              f"{got['prompt_tokens']} tokens): tokenizer, chat template or "
                              "prompt options changed")
    a, b = expected["token_ids"], got["token_ids"]
    tokens_equal = expected["tokens_sha256"] == got["tokens_sha256"] and a == b
    text_equal = expected["text_sha256"] == got["text_sha256"]
    if tokens_equal and text_equal:
        return RowDiff(row, "exact", expected_tokens=len(a), got_tokens=len(b),
                       text_equal=True, tokens_equal=True)
    index = first_difference(a, b)
    out = RowDiff(row, "differs", first_token=index, expected_token=_at(a, index),
                  got_token=_at(b, index), expected_tokens=len(a), got_tokens=len(b),
                  text_equal=text_equal, tokens_equal=tokens_equal)
    if index is None:
        out.detail = "same token ids, different text hash (the tokenizer decodes differently)"
    else:
        shown = []
        for name, ids, token in (("fixture", a, out.expected_token), ("run", b, out.got_token)):
            piece = "" if token is None or decode is None else f" {decode([token])!r}"
            shown.append(f"{name} {'end of output' if token is None else token}{piece}")
        out.detail = f"first differing token at output position {index}: " + " vs ".join(shown)
    return out


def diff_rows(expected: list[dict], got: list[dict], *, decode=None) -> list[RowDiff]:
    """Every row of `expected`, in its order, then rows only `got` has."""
    by_row = {r["row"]: r for r in got}
    out = []
    for row in expected:
        other = by_row.pop(row["row"], None)
        out.append(RowDiff(row["row"], "missing", detail="not in this run") if other is None
                   else diff_row(row, other, decode=decode))
    out += [RowDiff(r, "extra", detail="not in the fixture") for r in by_row]
    return out
