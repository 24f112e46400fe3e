"""`det-suite reference-check`: det mode's logprobs against the fp32 dequantized reference
forward of the same checkpoint, beside the stock path's (checks.reference_agreement)."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    from det_suite.checks.reference_agreement import DEFAULT_STOCK_MARGIN

    parser = subparsers.add_parser(
        "reference-check", help="det mode vs an fp32 dequantized reference forward",
        description="Is the fast path right, not only stable: selected-token logprobs of det "
                    "mode and of the stock control against transformers' fp32 forward of the "
                    "same checkpoint (FP8 weights dequantized, activations not quantized).")
    parser.add_argument("--model", default="synthetic:tiny?seed=0",
                        help="local path, hub id or synthetic:<preset>?seed=S")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--tolerance", type=float, default=None,
                        help="also gate det mode's largest |delta| at this absolute value")
    parser.add_argument("--stock-margin", type=float, default=DEFAULT_STOCK_MARGIN,
                        help="det's mean |delta| may be at most this times the stock path's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", metavar="PATH", help="write the result as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write a Markdown summary")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from det_suite.checks.reference_agreement import ReferenceSettings, run_reference_agreement
    from det_suite.reports.environment import environment
    from det_suite.reports.files import write_json_atomic, write_text_atomic

    try:
        settings = ReferenceSettings(model=args.model, prompts=args.prompts,
                                     prompt_len=args.prompt_len,
                                     max_new_tokens=args.max_new_tokens,
                                     tolerance=args.tolerance, stock_margin=args.stock_margin,
                                     seed=args.seed, device=args.device)
    except ValueError as exc:
        print(f"det-suite reference-check: error: {exc}", file=sys.stderr)
        return 2
    result = run_reference_agreement(settings)
    text = result.markdown()
    print(text)
    if args.json:
        write_json_atomic(args.json, {**result.to_json(), "environment": environment()})
    if args.markdown:
        write_text_atomic(args.markdown, text)
    return 0 if result.passed else 1
