"""GSM8K text-hash fixtures: record a run's per-row hashes, then check any later run against
them, row by row and token by token (issue 13).

`record_gsm8k` runs the rows and writes the fixture under fixtures/gsm8k/<model>/ named by
its key (backend, mode, platform, stack): see `det_suite.gsm8k.fixture`.

`check_gsm8k` takes a fixture (a file, or the one in a folder whose key matches this
machine), repeats its work (same data, rows, prompt, max_new_tokens; batch size, engine,
device and model location may be changed), and compares every row:
  - "exact": text hash and token ids equal;
  - "differs": the row, the first differing output token and both ids are named;
  - "question drifted" / "prompt drifted": the input itself changed (data set, tokenizer,
    template), so the outputs are not compared.
With `control`, the fixture's work runs on the m-dependent arm (`engine.m_dependent`: det
with FP8 linears whose schedule follows M), the fixture check's positive control: it must
NOT match (exit 0 when some row differs, 1 when every row is exact: the check could not
show that it detects a schedule change here). The tiny model's one-row fixture cannot show
it (docs/model-controls.md); the 8B-shaped model's can.
A fixture recorded for another model, backend, mode, GPU family or runtime stack is "not
comparable": reported with the reasons, never as a failure and never as a pass; nothing is
run. A kernel-policy change since the recording (tile table, kernels, launch code) is named
beside the verdict: it is what the check shows outputs survive.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from det_suite.gsm8k.diff import RowDiff, diff_rows
from det_suite.gsm8k.run import Gsm8kRun, Gsm8kSettings, run_gsm8k, run_key

EXIT_EXACT, EXIT_DIFFERS, EXIT_USAGE, EXIT_NOT_COMPARABLE = 0, 1, 2, 3
DEFAULT_FIXTURES = "fixtures/gsm8k"


# -- record ----------------------------------------------------------------------------------

@dataclass
class RecordResult:
    path: Path
    run: Gsm8kRun


def record_gsm8k(settings: Gsm8kSettings, folder=DEFAULT_FIXTURES, *, force: bool = False,
                 environment: dict | None = None, **run_options) -> RecordResult:
    """Run `settings` and write its fixture (no output texts) into `folder`; refuses to
    replace an existing fixture unless `force` (checked before the run)."""
    from det_suite.gsm8k.fixture import fixture_path, write_fixture

    key = run_options.pop("key", None) or run_key(settings)
    path = fixture_path(folder, key)
    if path.exists() and not force:
        raise FileExistsError(f"{path}: a fixture with this key exists; check against it, or "
                              "pass --force to record over it")
    run = run_gsm8k(settings, key=key, **run_options)
    if environment is None:
        from det_suite.reports.environment import environment as capture
        environment = capture()
    write_fixture(path, run.payload(environment, texts=False))
    return RecordResult(path, run)


# -- check -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckSettings:
    fixture: str | None = None            # a fixture file; None: search `fixtures`
    fixtures: str = DEFAULT_FIXTURES
    # Where and how the work runs here (None: the fixture's own value).
    model: str | None = None              # the fixture's model at another location
    backend: str = "embedded"             # for the search only (a file names its own)
    mode: str = "det"                     # for the search only
    device: str | None = None
    cuda_graph: bool | None = None
    batch_size: int | None = None
    data: str | None = None               # the fixture's data at another location
    rows: tuple[int, ...] | None = None   # a subset of the fixture's rows
    stages: int | None = None             # det mode: the FP8 kernel's pipeline depth
    keep_texts: bool = True
    progress: bool = True
    control: bool = False                 # run the work on the m-dependent arm; must differ


CONTROL_MODE = "m-dependent"
CONTROL_NOT_SHOWN = ("this check could not show that it detects a schedule change on this "
                     "runner")


@dataclass
class CheckResult:
    status: str                           # "exact", "differs" or "not comparable"
    fixture: str | None
    reasons: list[str] = field(default_factory=list)        # why not comparable
    diffs: list[RowDiff] = field(default_factory=list)
    policy_changes: list[str] = field(default_factory=list)
    fixture_payload: dict | None = None
    run: Gsm8kRun | None = None
    control: bool = False

    @property
    def exit_code(self) -> int:
        if self.control:    # the positive control passes by differing
            return {"differs": EXIT_EXACT, "exact": EXIT_DIFFERS}.get(self.status,
                                                                      EXIT_NOT_COMPARABLE)
        return {"exact": EXIT_EXACT, "differs": EXIT_DIFFERS}.get(self.status,
                                                                  EXIT_NOT_COMPARABLE)

    @property
    def differing(self) -> list[RowDiff]:
        return [d for d in self.diffs if not d.exact]


def _policy_changes(recorded: dict, current: dict) -> list[str]:
    names = {"table_sha256": "tile table", "kernels_sha256": "kernel sources (det_suite/kernels)",
             "ops_sha256": "launch code (det_suite/ops)"}
    return [f"{label} changed since the fixture ({str(recorded.get(k))[:12]} -> "
            f"{str(current.get(k))[:12]})" for k, label in names.items()
            if recorded.get(k) != current.get(k)]


def _find(s: CheckSettings, key: dict) -> tuple[Path | None, list[str]]:
    """The fixture in `s.fixtures` comparable with `key`, or None and why each is not."""
    from det_suite.gsm8k.fixture import FixtureError, fixtures_in, read_fixture
    from det_suite.gsm8k.identity import comparability, model_label

    reasons, found = [], []
    for path in fixtures_in(s.fixtures):
        try:
            recorded = read_fixture(path)["key"]
        except FixtureError as error:
            reasons.append(f"{path}: unreadable ({error})")
            continue
        why = comparability(recorded, key)
        if why:
            reasons.append(f"{path}: " + "; ".join(why))
        else:
            found.append(path)
    if len(found) > 1:
        raise ValueError(f"fixtures: {len(found)} fixtures in {s.fixtures} match this run's "
                         f"key: {[str(p) for p in found]}; pass one with fixture=")
    if not found and not reasons:
        reasons.append(f"no fixture in {s.fixtures} (for {model_label(key['model'])})")
    return (found[0] if found else None), reasons


def check_gsm8k(s: CheckSettings, **run_options) -> CheckResult:
    """Repeat a fixture's work here and compare (see the module docstring). `run_options`
    go to `run_gsm8k` (an already opened backend, checkpoint or tokenizer, for tests)."""
    from det_suite.gsm8k.fixture import read_fixture
    from det_suite.gsm8k.identity import comparability, model_identity
    from det_suite.gsm8k.prompts import PROMPT_FORMAT
    from det_suite.gsm8k.run import settings_from_record

    if s.control and s.stages is not None:
        raise ValueError("stages: pins det-suite's FP8 kernel; the control runs the "
                         "m-dependent arm's linears instead (drop one of the two)")
    identity = None
    if s.fixture is None:
        if s.model is None:
            raise ValueError("--model: required to find a fixture in a folder "
                             "(or pass --fixture)")
        probe = Gsm8kSettings(model=s.model, backend=s.backend, mode=s.mode, device=s.device,
                              progress=s.progress)
        key = run_key(probe)
        path, reasons = _find(s, key)
        if path is None:
            return CheckResult("not comparable", None, reasons=reasons)
        identity = key["model"]
    else:
        path = Path(s.fixture)
    fixture = read_fixture(path)
    record = fixture["settings"]
    rows = s.rows
    if rows is not None:
        outside = sorted(set(rows) - set(record["rows"]))
        if outside:
            raise ValueError(f"rows: {outside[:5]} are not in the fixture's rows")
    settings = settings_from_record(record, model=s.model, device=s.device,
                                    cuda_graph=s.cuda_graph, batch_size=s.batch_size,
                                    data=s.data, rows=rows, stages=s.stages,
                                    keep_texts=s.keep_texts,
                                    progress=s.progress)
    key = run_key(settings, model_identity=identity or model_identity(
        settings.model, progress=settings.progress))
    reasons = comparability(fixture["key"], key)
    if record["prompt"]["format"] != PROMPT_FORMAT:
        reasons.append(f"prompt format: recorded {record['prompt']['format']}, this "
                       f"det-suite writes {PROMPT_FORMAT}")
    if reasons:
        return CheckResult("not comparable", str(path), reasons=reasons, fixture_payload=fixture,
                           control=s.control)
    if s.control:   # the fixture's work, keyed as the fixture, computed by the control arm
        settings = replace(settings, mode=CONTROL_MODE)
    run = run_gsm8k(settings, key=key, **run_options)
    wanted = [r for r in fixture["rows"] if rows is None or r["row"] in set(rows)]
    diffs = diff_rows(wanted, run.rows, decode=run.decode)
    status = "exact" if all(d.exact for d in diffs) else "differs"
    return CheckResult(status, str(path), diffs=diffs,
                       policy_changes=_policy_changes(fixture["policy"], run.policy),
                       fixture_payload=fixture, run=run, control=s.control)


# -- verdict ---------------------------------------------------------------------------------

def _rows(n: int) -> str:
    return f"{n} row{'' if n == 1 else 's'}"


def verdict_lines(result: CheckResult, *, limit: int = 20) -> list[str]:
    if result.status == "not comparable":
        head = (f"fixture {result.fixture} is NOT COMPARABLE with this run (not a failure, not "
                "a pass):" if result.fixture else "no comparable fixture:")
        return [head] + [f"  {reason}" for reason in result.reasons]
    lines = []
    n, bad = len(result.diffs), result.differing
    if result.control:
        lines.append(f"positive control ({CONTROL_MODE} arm): flagged, as it must be: "
                     f"{len(bad)} of {_rows(n)} differ from {result.fixture}" if bad else
                     f"positive control ({CONTROL_MODE} arm): NOT flagged: all {_rows(n)} "
                     f"match {result.fixture}, so {CONTROL_NOT_SHOWN} (FAIL)")
    elif result.status == "exact":
        lines.append(f"{'all ' if n > 1 else ''}{_rows(n)} exact against {result.fixture}: "
                     "output texts and token sequences identical")
    else:
        kinds = {}
        for d in bad:
            kinds[d.status] = kinds.get(d.status, 0) + 1
        lines.append(f"{len(bad)} of {_rows(n)} NOT exact against {result.fixture} ("
                     + ", ".join(f"{k}: {v}" for k, v in kinds.items()) + ")")
        for d in bad[:limit]:
            lines.append(f"  row {d.row}: {d.status}; {d.detail}")
        if len(bad) > limit:
            lines.append(f"  ... and {len(bad) - limit} more rows (see the JSON)")
    if result.run is not None:
        recorded = result.fixture_payload["summary"]
        lines.append(f"this run: {result.run.headline()}; fixture: {recorded['correct']}/"
                     f"{recorded['rows']} correct")
    lines += result.policy_changes
    return lines


def check_payload(result: CheckResult, environment: dict | None) -> dict:
    return {"kind": "gsm8k-check", "status": result.status, "exit_code": result.exit_code,
            "fixture": result.fixture, "headline": verdict_lines(result)[0],
            "verdict": verdict_lines(result, limit=10 ** 9), "reasons": result.reasons,
            "policy_changes": result.policy_changes,
            "rows": [d.as_dict() for d in result.diffs], "environment": environment or {}}


def write_check(result: CheckResult, out_dir, environment: dict | None = None) -> Path:
    """check.json (verdict and per-row diffs) and, when the work ran, run.json (the run in
    fixture format, with texts: `det-suite compare` reads it) into out_dir."""
    from det_suite.gsm8k.fixture import write_fixture
    from det_suite.reports.files import write_json_atomic, write_text_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "check.json", check_payload(result, environment))
    write_text_atomic(out / "check.md", "# GSM8K fixture check\n\n"
                      + "\n".join(f"- {line.strip()}" for line in verdict_lines(result,
                                                                                limit=200))
                      + "\n")
    if result.run is not None:
        write_fixture(out / "run.json", result.run.payload(environment))
    return out
