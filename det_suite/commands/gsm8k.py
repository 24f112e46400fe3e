"""`det-suite gsm8k record|check`: GSM8K text-hash fixtures (det_suite.checks.gsm8k).

record: run GSM8K rows greedily on a backend and write the fixture (per row: sha256 of the
question, the prompt ids, the output text and the output ids; the ids; the answer and
whether it is correct) to fixtures/gsm8k/<model>/<backend>-<mode>__<platform>__<stack>.json.
check: repeat a fixture's work here and compare row by row; names each differing row and
its first differing token, and whether the question or the prompt itself drifted.

Exit codes: 0 record written / every row exact; 1 some row not exact (or a bad fixture);
2 usage error; 3 not comparable (the fixture is for another model, backend, mode, GPU
family or runtime stack, or none was found): neither a pass nor a failure.
"""

from __future__ import annotations

import argparse
import sys

from det_suite.checks.gsm8k import DEFAULT_FIXTURES, EXIT_USAGE


def _engine(text: str | None):
    if text is None:
        return None
    if text not in ("graph", "eager"):
        raise ValueError(f"engine: expected graph or eager, got {text!r}")
    return text == "graph"


def _run_options(p, *, check: bool) -> None:
    keep = "(default: the fixture's)" if check else ""
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--engine", choices=("graph", "eager"),
                   help=f"CUDA Graph or eager decode {keep or '(default: graph on CUDA)'}")
    p.add_argument("--batch-size", type=int, metavar="N", help=f"rows per batch {keep}")
    p.add_argument("--rows", metavar="SPEC",
                   help="rows, e.g. 32-159 or 0,5,7-9 " + ("(a subset of the fixture's)" if check
                                                           else "(default: the preset's)"))
    p.add_argument("--data", help="where the data is here " + (keep or
                   "(default: synthetic): synthetic[?seed=S&size=N], a local file or "
                   "folder with GSM8K's schema, or a hub id such as openai/gsm8k"))
    p.add_argument("--stages", type=int, metavar="N",
                   help="det mode: every FP8 linear at N pipeline stages instead of its tile's "
                        "own (the 2- vs 3-stage check: the bits must not change)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "gsm8k", help="GSM8K text-hash fixtures: record one, check a run against one",
        description=__doc__.split("\n\n", 1)[1])
    parser.set_defaults(handler=lambda args: (parser.print_help(sys.stderr), EXIT_USAGE)[1])
    sub = parser.add_subparsers(dest="gsm8k_command", metavar="<record|check>")

    rec = sub.add_parser("record", help="run GSM8K rows and write their fixture")
    rec.add_argument("--model", default="synthetic:tiny?seed=0",
                     help="PATH, hub id or synthetic:<preset>?seed=S (default "
                          "synthetic:tiny?seed=0)")
    rec.add_argument("--backend", default="embedded", choices=("embedded",))
    rec.add_argument("--mode", default="det", choices=("det", "stock"))
    rec.add_argument("--preset", choices=("full", "small"),
                     help="full: rows 32-159, 512 new tokens, batch 32 (default on a GPU); "
                          "small: row 32, 4 new tokens, no instruction (CPU)")
    rec.add_argument("--max-new-tokens", type=int, metavar="N")
    rec.add_argument("--shots", type=int, default=0, metavar="K",
                     help="few-shot exemplars: rows 0..K-1 of the split (default 0)")
    rec.add_argument("--split", default="test")
    rec.add_argument("--config", default="main", help="hub config (default main)")
    rec.add_argument("--prompt-style", default="auto", choices=("auto", "chat", "plain"))
    rec.add_argument("--instruction", action=argparse.BooleanOptionalAction, default=None,
                     help="add the '#### <number>' instruction after the question (default: "
                          "the preset's; full: yes, small: no)")
    rec.add_argument("--thinking", action="store_true",
                     help="enable_thinking=True for the chat template (Qwen3)")
    _run_options(rec, check=False)
    rec.add_argument("--fixtures", default=DEFAULT_FIXTURES, metavar="DIR")
    rec.add_argument("--force", action="store_true", help="replace an existing fixture")
    rec.set_defaults(handler=record)

    chk = sub.add_parser("check", help="repeat a fixture's work and compare row by row")
    chk.add_argument("--fixture", metavar="FILE",
                     help="the fixture (default: the one in --fixtures matching this run)")
    chk.add_argument("--fixtures", default=DEFAULT_FIXTURES, metavar="DIR")
    chk.add_argument("--model", help="the model here (default: the fixture's; required "
                                     "without --fixture)")
    chk.add_argument("--backend", default="embedded", choices=("embedded",))
    chk.add_argument("--mode", default="det", choices=("det", "stock"))
    chk.add_argument("--control", action="store_true",
                     help="the check's positive control: run the fixture's work on the "
                          "m-dependent arm (det with FP8 linears whose schedule follows M); "
                          "exit 0 when some row differs, 1 when every row matches")
    _run_options(chk, check=True)
    chk.add_argument("--out", default="results/gsm8k", metavar="DIR",
                     help="check.json, check.md and run.json (default results/gsm8k)")
    chk.set_defaults(handler=check)


def _common(args) -> dict:
    from det_suite.gsm8k.data import parse_rows

    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"batch-size: expected an int >= 1, got {args.batch_size}")
    return dict(device=args.device, cuda_graph=_engine(args.engine),
                batch_size=args.batch_size,
                rows=parse_rows(args.rows) if args.rows else None, data=args.data,
                stages=args.stages, progress=not args.no_progress)


def _record_settings(args):
    import torch

    from det_suite.gsm8k.prompts import PromptOptions
    from det_suite.gsm8k.run import PRESETS, Gsm8kSettings

    preset = args.preset or ("full" if torch.cuda.is_available() else "small")
    values = dict(PRESETS[preset])
    common = _common(args)
    values.update({k: v for k, v in common.items() if v is not None})
    if args.max_new_tokens is not None:
        values["max_new_tokens"] = args.max_new_tokens
    instruction = values.pop("prompt", PromptOptions()).instruction
    if args.instruction is not None:
        instruction = args.instruction
    return Gsm8kSettings(model=args.model, backend=args.backend, mode=args.mode,
                         split=args.split, data_config=args.config, shots=args.shots,
                         keep_texts=False,
                         prompt=PromptOptions(style=args.prompt_style,
                                              instruction=instruction,
                                              thinking=args.thinking), **values)


def record(args) -> int:
    from det_suite.checks.gsm8k import record_gsm8k

    try:
        settings = _record_settings(args)
        print(f"gsm8k record: {settings.model} ({settings.backend}, {settings.mode}), "
              f"{len(settings.rows)} row(s) of {settings.data}, {settings.max_new_tokens} new "
              f"tokens, batch {settings.batch_size}", flush=True)
        result = record_gsm8k(settings, args.fixtures, force=args.force)
    except (ValueError, FileExistsError) as exc:
        print(f"gsm8k record: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"gsm8k record: {result.run.headline()}")
    print(f"gsm8k record: wrote {result.path} ({result.run.seconds:.1f} s)")
    return 0


def check(args) -> int:
    from det_suite.checks.gsm8k import CheckSettings, check_gsm8k, verdict_lines, write_check
    from det_suite.errors import InputError
    from det_suite.gsm8k.fixture import FixtureError
    from det_suite.reports.environment import environment

    try:
        settings = CheckSettings(fixture=args.fixture, fixtures=args.fixtures,
                                 model=args.model, backend=args.backend, mode=args.mode,
                                 control=args.control, **_common(args))
        result = check_gsm8k(settings)
    except InputError as exc:      # e.g. no fixture file at --fixture
        print(f"gsm8k check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FixtureError as exc:
        print(f"gsm8k check: FAILED: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"gsm8k check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = write_check(result, args.out, environment())
    for line in verdict_lines(result):
        print(f"gsm8k check: {line}")
    verdict = {0: "OK", 1: "FAILED"}.get(result.exit_code, "NOT COMPARABLE")
    print(f"gsm8k check: {verdict}; results in {out}")
    return result.exit_code
