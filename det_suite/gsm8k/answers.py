"""Final answers: the reference from a GSM8K `answer` field, the model's from its output text,
and whether they agree.

GSM8K ends every reference solution with a line `#### <number>`. A model's answer is the
first number after its last `####`, on that line, when there is one (source "marker"), else
the last number in the text (source "last-number"), else none. Numbers are compared as exact decimals after
dropping thousands separators and a leading currency sign: "1,200", "$1200" and "1200.00"
are the same answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

MARKER = "####"
# A number not glued to a word or another number: "x=-3" gives -3, "5-3" gives 3, "$1,200.50"
# gives 1,200.50; a trailing sentence period is not part of it.
_NUMBER = re.compile(r"(?<![\w.])-?\$?\d[\d,]*(?:\.\d+)?")

SOURCES = ("marker", "last-number", "none")


@dataclass(frozen=True)
class Extracted:
    value: str | None     # canonical decimal text ("72", "-3", "2.5"), None when none found
    source: str           # one of SOURCES


def normalize_number(text: str) -> str | None:
    """Canonical text of one number as GSM8K writes them, or None when it is not one."""
    cleaned = text.strip().replace(",", "").replace("$", "")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _numbers(text: str) -> list[str]:
    return [n for n in (normalize_number(m.group(0)) for m in _NUMBER.finditer(text))
            if n is not None]


def extract_answer(text: str) -> Extracted:
    """The model's final answer in `text` (see the module docstring for the rule)."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    _, marker, tail = text.rpartition(MARKER)
    if marker:
        after = _numbers(tail.split("\n", 1)[0])
        if after:
            return Extracted(after[0], "marker")
    numbers = _numbers(text)
    if numbers:
        return Extracted(numbers[-1], "last-number")
    return Extracted(None, "none")


def reference_answer(answer: str, *, where: str = "answer") -> str:
    """The number after the `####` line of a GSM8K reference solution; ValueError naming
    `where` when the field does not end that way (the data is not GSM8K-schema)."""
    if not isinstance(answer, str):
        raise ValueError(f"{where}: expected a str ending in '#### <number>', got "
                         f"{type(answer).__name__}")
    _, marker, tail = answer.rpartition(MARKER)
    numbers = _numbers(tail.split("\n", 1)[0]) if marker else []
    if not numbers:
        raise ValueError(f"{where}: expected the solution to end in '#### <number>', got "
                         f"{answer[-60:]!r}")
    return numbers[0]


def is_correct(extracted: Extracted, reference: str) -> bool:
    return extracted.value is not None and Decimal(extracted.value) == Decimal(reference)
