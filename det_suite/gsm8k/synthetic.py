"""A GSM8K-schema data set det-suite generates offline: short arithmetic word problems with
known answers (one sentence or two, so that a CPU run on the Triton interpreter, where a
byte-level synthetic tokenizer makes every character a token, stays short), in GSM8K's format (`question`, and an `answer` that works the problem with
`<<expr=value>>` calculator annotations and ends in `#### <number>`).

Same seed, same rows, on any machine and any Python: every number comes from sha256 of
(seed, row, field), never from `random`. It is loaded like any local file: written as JSON
lines, then read through `datasets` (`det_suite.gsm8k.data`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

DEFAULT_SIZE = 1319        # the size of GSM8K's test split, so row numbers mean the same
NAMES = ("Ava", "Ben", "Carla", "Dev", "Elif", "Farid", "Grace", "Hiro", "Ines", "Jon",
         "Kemi", "Luca", "Mei", "Nora", "Omar", "Priya")
ITEMS = ("apples", "stickers", "marbles", "pencils", "cookies", "stamps", "shells", "cards")


def _draw(seed: int, row: int, field: str, low: int, high: int) -> int:
    """An int in [low, high], a pure function of (seed, row, field)."""
    digest = hashlib.sha256(f"gsm8k/{seed}/{row}/{field}".encode()).digest()
    return low + int.from_bytes(digest[:8], "little") % (high - low + 1)


def _pick(seed: int, row: int, field: str, options: tuple[str, ...]) -> str:
    return options[_draw(seed, row, field, 0, len(options) - 1)]


def _solution(steps: list[tuple[str, str, int]], answer: int) -> str:
    """GSM8K's answer layout: one line per step with its calculator annotation, then ####."""
    lines = [f"{text} {expr} = <<{expr}={value}>>{value}." for text, expr, value in steps]
    return "\n".join(lines + [f"#### {answer}"])


def _buy_and_give(seed, row, name, item):
    a, b = _draw(seed, row, "a", 5, 60), _draw(seed, row, "b", 2, 40)
    c = _draw(seed, row, "c", 1, a + b - 1)
    question = f"{name} has {a} {item}, buys {b} more and gives away {c}. How many are left?"
    return question, _solution([("After buying,", f"{a}+{b}", a + b),
                                ("After giving some away,", f"{a + b}-{c}", a + b - c)],
                               a + b - c)


def _daily_sales(seed, row, name, item):
    a, d, p = (_draw(seed, row, "a", 2, 30), _draw(seed, row, "d", 2, 14),
               _draw(seed, row, "p", 1, 9))
    question = f"{name} sells {a} {item} a day for {d} days at ${p} each. How much is earned?"
    return question, _solution([(f"{name} sells", f"{a}*{d}", a * d),
                                ("That earns", f"{a * d}*{p}", a * d * p)], a * d * p)


def _boxes(seed, row, name, item):
    a, b = _draw(seed, row, "a", 3, 24), _draw(seed, row, "b", 2, 15)
    c = _draw(seed, row, "c", 1, a - 1)
    question = f"{name} fills {b} boxes of {a} {item} and has {c} more. How many in all?"
    return question, _solution([("The boxes hold", f"{a}*{b}", a * b),
                                ("With the rest,", f"{a * b}+{c}", a * b + c)], a * b + c)


def _pages(seed, row, name, _item):
    a, d = _draw(seed, row, "a", 5, 40), _draw(seed, row, "d", 2, 20)
    question = f"{name} reads {a} pages a day. How many days for {a * d} pages?"
    return question, _solution([("It takes", f"{a * d}/{a}", d)], d)


def _half_left(seed, row, name, _item):
    b = _draw(seed, row, "b", 2, 30)
    rest = 2 * _draw(seed, row, "r", 3, 50)
    a = b + rest
    question = f"{name} had ${a}, spent ${b}, then half the rest. How many dollars are left?"
    return question, _solution([("After spending,", f"{a}-{b}", rest),
                                ("Half of that is", f"{rest}/2", rest // 2)], rest // 2)


def _week_run(seed, row, name, _item):
    a, b = _draw(seed, row, "a", 2, 12), _draw(seed, row, "b", 3, 20)
    total = 5 * a + 2 * b
    question = f"{name} runs {a} km each weekday and {b} km each weekend day. Km per week?"
    return question, _solution([("Weekdays:", f"5*{a}", 5 * a), ("Weekend:", f"2*{b}", 2 * b),
                                ("In total,", f"{5 * a}+{2 * b}", total)], total)


TEMPLATES = (_buy_and_give, _daily_sales, _boxes, _pages, _half_left, _week_run)


def synthetic_row(seed: int, row: int) -> dict:
    """Row `row` of the set for `seed`: {"question": ..., "answer": ...}."""
    template = TEMPLATES[_draw(seed, row, "template", 0, len(TEMPLATES) - 1)]
    question, answer = template(seed, row, _pick(seed, row, "name", NAMES),
                                _pick(seed, row, "item", ITEMS))
    return {"question": question, "answer": answer}


def _check(seed: int, size: int) -> None:
    for name, value, low in (("seed", seed, 0), ("size", size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")


def synthetic_rows(seed: int = 0, size: int = DEFAULT_SIZE) -> list[dict]:
    _check(seed, size)
    return [synthetic_row(seed, row) for row in range(size)]


def write_synthetic_jsonl(path, seed: int = 0, size: int = DEFAULT_SIZE) -> Path:
    """Write the set as JSON lines (the format `datasets`' json builder reads)."""
    from det_suite.reports.files import write_text_atomic

    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in synthetic_rows(seed, size))
    return write_text_atomic(path, text)
