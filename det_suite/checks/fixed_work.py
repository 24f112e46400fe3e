"""Fixed-work comparison: texts and token sequences exact between any two runs of a check
(arms, pipeline depths, boots, engines, machines) (issue 13).

`load_outputs` reads a check's JSON result into keyed outputs; it knows:
  - GSM8K runs and fixtures (`kind` "gsm8k"): one output per row, keyed "row N", with the
    prompt hash as the work, the text (or its hash) and the token ids;
  - cache-hit results (`det-suite cache-hit`'s cache_hit.json): one output per (mode,
    engine, prefix, batch, rep, phase), the generated ids and the selected-token logprobs;
  - the generic form any check may write, `{"kind": "outputs", "outputs": [{"key": ...,
    "token_ids": [...], "text": ... or "text_sha256": ..., "work_sha256": ...,
    "values": [...]}]}` (every field but key and token_ids optional).
`compare_outputs` holds two of them to the same bits: ids equal (first differing position
named), texts (or text hashes) equal, values equal as floats (NaN equal to NaN; max |delta|
reported). Two files are comparable only when they hold the same work: the same kind, the
same keys (a subset with `subset=True`) and, where recorded, the same inputs per key.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from det_suite.gsm8k.diff import first_difference
from det_suite.gsm8k.identity import sha256_ids, sha256_text

EXIT_EXACT, EXIT_DIFFERS, EXIT_USAGE, EXIT_NOT_COMPARABLE = 0, 1, 2, 3


@dataclass(frozen=True)
class Output:
    key: str
    token_ids: tuple[int, ...]
    text_sha256: str | None = None
    text: str | None = None
    work: str | None = None                   # a hash of the input (prompt ids)
    values: tuple[float, ...] | None = None   # e.g. selected-token logprobs
    tokens_sha256: str | None = None          # the recorded hash of token_ids (fixtures)


@dataclass
class OutputSet:
    kind: str
    source: str
    label: str                                # what run this was, in words
    outputs: dict[str, Output]


def _gsm8k(payload: dict, source: str) -> OutputSet:
    s, platform = payload.get("settings", {}), payload.get("key", {}).get("platform", {})
    where = platform.get("gpu_family") or platform.get("device") or "?"
    stages = "" if s.get("fp8_stages") is None else f" fp8 stages {s['fp8_stages']}"
    label = (f"{s.get('backend')} {s.get('mode')}{stages} {s.get('engine')} batch "
             f"{s.get('batch_size')} on {where}, {s.get('model')}")
    outputs = {}
    for r in payload["rows"]:
        key = f"row {r['row']}"
        outputs[key] = Output(key, tuple(r["token_ids"]), r.get("text_sha256"), r.get("text"),
                              r.get("prompt_sha256"), tokens_sha256=r.get("tokens_sha256"))
    return OutputSet("gsm8k", source, label, outputs)


def _cache_hit(payload: dict, source: str) -> OutputSet:
    outputs = {}
    for c in payload["comparisons"]:
        case = f"{c['mode']} {{engine}} prefix {c['prefix']} batch {c['batch']} rep {c['rep']}"
        if c["phase"] in ("hit", "warm"):
            pairs = [(f"{case.format(engine=c['engine'])} cold", "cold"),
                     (f"{case.format(engine=c['engine'])} {c['phase']}", "other")]
        else:   # "cold-vs-<base>": base engine's cold against this engine's cold
            base = c["phase"][len("cold-vs-"):]
            pairs = [(f"{case.format(engine=base)} cold", "cold"),
                     (f"{case.format(engine=c['engine'])} cold", "other")]
        for key, side in pairs:
            outputs.setdefault(key, Output(key, tuple(c[f"{side}_ids"]),
                                           values=tuple(c[f"{side}_logprobs"])))
    s = payload.get("settings", {})
    return OutputSet("cache-hit", source, f"cache-hit {s.get('model')} on {s.get('backend')}",
                     outputs)


def _generic(payload: dict, source: str) -> OutputSet:
    outputs = {}
    for i, o in enumerate(payload["outputs"]):
        if "key" not in o or "token_ids" not in o:
            raise ValueError(f"{source}: outputs[{i}]: expected 'key' and 'token_ids'")
        key = str(o["key"])
        if key in outputs:
            raise ValueError(f"{source}: outputs[{i}]: key {key!r} appears twice")
        text = o.get("text")
        outputs[key] = Output(key, tuple(o["token_ids"]),
                              o.get("text_sha256") or (sha256_text(text) if text is not None
                                                       else None),
                              text, o.get("work_sha256"),
                              tuple(o["values"]) if o.get("values") is not None else None,
                              o.get("tokens_sha256"))
    return OutputSet(payload.get("check", "outputs"), source,
                     payload.get("label", f"{payload.get('check', 'outputs')} run"), outputs)


def load_outputs(path) -> OutputSet:
    """A check's JSON result as keyed outputs (ValueError naming the file otherwise)."""
    source = str(path)
    try:
        payload = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{source}: no such file") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{source}: not JSON ({error})") from None
    reader = None
    if isinstance(payload, dict) and payload.get("kind") == "gsm8k" and "rows" in payload:
        reader = _gsm8k
    elif isinstance(payload, dict) and isinstance(payload.get("comparisons"), list) \
            and all(isinstance(c, dict) and "cold_ids" in c for c in payload["comparisons"]):
        reader = _cache_hit
    elif isinstance(payload, dict) and payload.get("kind") == "outputs" \
            and isinstance(payload.get("outputs"), list):
        reader = _generic
    if reader is not None:
        try:
            return reader(payload, source)
        except (KeyError, TypeError) as error:
            raise ValueError(f"{source}: a malformed {reader.__name__.strip('_')} result "
                             f"({type(error).__name__}: {error})") from None
    raise ValueError(f"{source}: not a result with per-row outputs; expected a GSM8K run or "
                     "fixture, a cache-hit result, or {\"kind\": \"outputs\", \"outputs\": [...]}")


@dataclass
class OutputDiff:
    key: str
    first_token: int | None          # first differing id position (None: ids equal)
    a_token: int | None
    b_token: int | None
    a_tokens: int
    b_tokens: int
    text_equal: bool | None          # None: neither side recorded a text
    values_equal: bool | None        # None: no values recorded
    max_abs_delta: float | None
    tokens_hash_equal: bool | None = None   # None: a side recorded no tokens_sha256
    corrupt: list[str] = field(default_factory=list)  # a side's hash is not of its own data


@dataclass
class CompareResult:
    a: str
    b: str
    a_label: str
    b_label: str
    status: str                      # "exact", "differs" or "not comparable"
    compared: int = 0
    values_compared: bool = False    # values (e.g. logprobs) were held to the same bits too
    hashes_compared: bool = False    # recorded tokens_sha256 were checked too
    reasons: list[str] = field(default_factory=list)
    diffs: list[OutputDiff] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"exact": EXIT_EXACT, "differs": EXIT_DIFFERS}.get(self.status,
                                                                  EXIT_NOT_COMPARABLE)

    def payload(self, environment: dict | None = None) -> dict:
        return {"kind": "fixed-work-compare", "status": self.status,
                "exit_code": self.exit_code, "a": self.a, "b": self.b,
                "values_compared": self.values_compared,
                "hashes_compared": self.hashes_compared,
                "a_label": self.a_label, "b_label": self.b_label, "compared": self.compared,
                "exact": self.compared - len(self.diffs), "headline": verdict_lines(self)[0],
                "reasons": self.reasons, "diffs": [asdict(d) for d in self.diffs],
                "environment": environment or {}}


def _values_equal(a, b) -> tuple[bool, float]:
    if len(a) != len(b):
        return False, math.inf
    same = all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))
    deltas = [abs(x - y) for x, y in zip(a, b) if not (math.isnan(x) or math.isnan(y))]
    return same, max(deltas, default=0.0)


def _corrupt(side: str, out: Output) -> list[str]:
    """A side whose recorded hashes are not of its own ids or text was edited or is corrupt:
    held as a difference, whatever the other side says (as `gsm8k check` does)."""
    notes = []
    if out.tokens_sha256 is not None and out.tokens_sha256 != sha256_ids(out.token_ids):
        notes.append(f"{side}'s tokens_sha256 is not the hash of its own token_ids (edited or "
                     "corrupt)")
    if out.text is not None and out.text_sha256 is not None \
            and out.text_sha256 != sha256_text(out.text):
        notes.append(f"{side}'s text_sha256 is not the hash of its own text (edited or "
                     "corrupt)")
    return notes


def _diff(a: Output, b: Output) -> OutputDiff | None:
    index = first_difference(a.token_ids, b.token_ids)
    text_equal = None
    if a.text is not None and b.text is not None:
        text_equal = a.text == b.text
    if a.text_sha256 is not None and b.text_sha256 is not None:
        text_equal = text_equal in (None, True) and a.text_sha256 == b.text_sha256
    tokens_hash_equal = None
    if a.tokens_sha256 is not None and b.tokens_sha256 is not None:
        tokens_hash_equal = a.tokens_sha256 == b.tokens_sha256
    values_equal, delta = None, None
    if a.values is not None and b.values is not None:
        values_equal, delta = _values_equal(a.values, b.values)
    corrupt = _corrupt("A", a) + _corrupt("B", b)
    if (index is None and text_equal in (None, True) and values_equal in (None, True)
            and tokens_hash_equal in (None, True) and not corrupt):
        return None
    pick = (lambda ids: ids[index] if index is not None and index < len(ids) else None)
    return OutputDiff(a.key, index, pick(a.token_ids), pick(b.token_ids), len(a.token_ids),
                      len(b.token_ids), text_equal, values_equal, delta, tokens_hash_equal,
                      corrupt)


def compare_outputs(a: OutputSet, b: OutputSet, *, subset: bool = False) -> CompareResult:
    result = CompareResult(a.source, b.source, a.label, b.label, "exact")
    if a.kind != b.kind:
        result.status = "not comparable"
        result.reasons.append(f"different checks: {a.kind} vs {b.kind}")
        return result
    only_a = [k for k in a.outputs if k not in b.outputs]
    only_b = [k for k in b.outputs if k not in a.outputs]
    if (only_a and only_b) or ((only_a or only_b) and not subset):
        for name, keys in (("A", only_a), ("B", only_b)):
            if keys:
                result.reasons.append(f"{len(keys)} outputs only in {name}: {keys[:5]}")
    common = [k for k in a.outputs if k in b.outputs]
    other_work = [k for k in common if a.outputs[k].work and b.outputs[k].work
                  and a.outputs[k].work != b.outputs[k].work]
    if other_work:
        result.reasons.append(f"{len(other_work)} outputs had different inputs (prompt "
                              f"hashes): {other_work[:5]}")
    if not common:
        result.reasons.append("no output in common")
    if result.reasons:
        result.status = "not comparable"
        return result
    result.compared = len(common)
    result.values_compared = any(a.outputs[k].values is not None
                                 and b.outputs[k].values is not None for k in common)
    result.hashes_compared = any(a.outputs[k].tokens_sha256 is not None
                                 or b.outputs[k].tokens_sha256 is not None for k in common)
    result.diffs = [d for d in (_diff(a.outputs[k], b.outputs[k]) for k in common) if d]
    result.status = "differs" if result.diffs else "exact"
    return result


def compare_files(a, b, *, subset: bool = False) -> CompareResult:
    return compare_outputs(load_outputs(a), load_outputs(b), subset=subset)


def verdict_lines(result: CompareResult, *, limit: int = 20) -> list[str]:
    if result.status == "not comparable":
        return (["NOT COMPARABLE: the two files do not hold the same work (not a failure, not "
                 "a pass)"] + [f"  {r}" for r in result.reasons])
    what = ("token sequences" + (", token hashes" if result.hashes_compared else "")
            + ", texts" + (" and values" if result.values_compared else ""))
    lines = [f"{result.compared}/{result.compared} outputs exact ({what})"
             if result.status == "exact" else
             f"{len(result.diffs)} of {result.compared} outputs differ ({what} compared)"]
    lines += [f"  A: {result.a_label} ({result.a})", f"  B: {result.b_label} ({result.b})"]
    for d in result.diffs[:limit]:
        parts = []
        if d.first_token is not None:
            parts.append(f"first differing token at {d.first_token}: A "
                         f"{'end' if d.a_token is None else d.a_token} vs B "
                         f"{'end' if d.b_token is None else d.b_token} ({d.a_tokens} vs "
                         f"{d.b_tokens} tokens)")
        if d.text_equal is False:
            parts.append("texts differ")
        if d.tokens_hash_equal is False:
            parts.append("tokens_sha256 differ")
        parts.extend(d.corrupt)
        if d.values_equal is False:
            parts.append(f"values differ, max |delta| {d.max_abs_delta:.3g}")
        lines.append(f"  {d.key}: " + "; ".join(parts))
    if len(result.diffs) > limit:
        lines.append(f"  ... and {len(result.diffs) - limit} more (see the JSON)")
    return lines
