"""`det-suite synth`: write a synthetic Qwen3 ModelOpt FP8 checkpoint (det_suite.models.synthetic).

Random weights scaled like a trained model's, static input scales calibrated from a short
forward pass (amax / 448), the real file layout (config.json, hf_quant_config.json,
safetensors with an index when sharded) and a self-contained tokenizer with a chat
template, so every model-level check runs offline. Same seed, same bytes, on any machine.
"""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    from det_suite.models.synthetic import PRESETS

    parser = subparsers.add_parser(
        "synth", help="write a synthetic Qwen3 FP8 checkpoint (offline model checks)",
        description=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS),
                        help="model shapes: tiny, tiny-wide, tiny-tied (CPU tests) or a published "
                             "Qwen3's (qwen3-4b: tied embeddings; qwen3-8b, qwen3-14b, "
                             "qwen3-32b)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write")
    parser.add_argument("--device", default=None,
                        help="where to build the weights (default: cuda when available, "
                             "else cpu); the bytes written are the same either way")
    parser.set_defaults(handler=run, needs_kernels=False)


def run(args) -> int:
    import time

    import torch

    from det_suite.models.synthetic import write_synthetic

    if args.seed < 0:
        print(f"det-suite synth: error: --seed must be non-negative, got {args.seed}",
              file=sys.stderr)
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    out = write_synthetic(args.preset, args.seed, args.out, device=device)
    print(f"det-suite synth: wrote synthetic:{args.preset}?seed={args.seed} to {out} "
          f"({time.perf_counter() - start:.1f} s on {device})")
    return 0
