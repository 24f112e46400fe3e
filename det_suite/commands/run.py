"""`det-suite run`: the main job on its embedded default.

Answers "does the shipped FP8 kernel keep its determinism promise on this machine?" with
the invariance harness: cached-suffix, batch-composition and 2- vs 3-stage comparisons of
det-suite's kernel under this machine's tile table, with the deliberately M-dependent
positive control that must be flagged. CPU-sized on the Triton interpreter without a GPU,
the Qwen3-8B shapes on a GPU. Reports land in --out (JSON, Markdown, heatmap).
"""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run", help="quick determinism check of the shipped kernel on this machine",
        description=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--out", default="results/run", metavar="DIR",
                        help="folder for the reports (default results/run)")
    parser.set_defaults(handler=run)


def _invariance_argv(out: str, on_gpu: bool) -> list[str]:
    argv = ["invariance", "--out", out, "--providers", "det_suite:s2", "det_suite:s3",
            "control"]
    if on_gpu:
        return argv + ["--full", "--shapes", "qwen3-8b", "k80-tail", "--dtypes", "bf16",
                       "--seeds", "0", "--no-graph"]
    return argv + ["--quick"]


def run(args) -> int:
    import torch

    from det_suite.platform.family import device_family, family_source, interpreter_active
    from det_suite.cli import build_parser
    from det_suite.dispatch import select_fp8_provider

    on_gpu = torch.cuda.is_available() and not interpreter_active()
    family = device_family()
    decision = select_fp8_provider(family=family, deterministic=True)
    print(f"det-suite run: tile table {family} ({family_source()}); deterministic-mode "
          f"dispatch here: {decision.provider.value} - {decision.reason}")
    if not on_gpu:
        print("det-suite run: CPU only - checks run on the Triton interpreter with small "
              "shapes; GPU-only checks (CUDA Graph replay, vendor GEMMs) are not run",
              file=sys.stderr)
    inv_args = build_parser().parse_args(_invariance_argv(args.out, on_gpu))
    code = inv_args.handler(inv_args)
    if code == 0:
        print(f"det-suite run: PASS - reports in {args.out}/ (invariance.md for a reviewer)")
    else:
        print(f"det-suite run: FAIL (exit {code}) - see {args.out}/invariance.md for the "
              "first differing rows")
    return code
