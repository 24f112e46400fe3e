"""`det-suite cache-hit`: the same selected-token logprobs cold and after a prefix-cache hit.

Runs the seed's matrix (prefix 128 / 1024 / 4096 x batch 1 / 4 / 2 x 2 repetitions) on the
embedded engine for det mode and the stock control: flush, the target prompt cold, a primer
that caches its prefix, the target again (a hit: cached tokens must be > 0) and a warm
repeat, each among other requests; eager and CUDA Graph engines (graph on CUDA only), and
optional chunked-prefill engines. Writes cache_hit.json (raw values) and cache_hit.md into
--out. Exit 0 when det mode is exact everywhere with every hit proven, 1 otherwise, 2 for a
usage error. --preset small is the CPU-sized version (the default without a GPU).
"""

from __future__ import annotations

import sys


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated ints, got {text!r}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "cache-hit", help="cold vs prefix-cache-hit logprobs, bit for bit (embedded engine)",
        description=__doc__.split("\n\n")[1])
    p.add_argument("--backend", default="embedded", choices=("embedded",))
    p.add_argument("--model", default="synthetic:tiny?seed=0",
                   help="PATH, hub id or synthetic:<preset>?seed=S (default "
                        "synthetic:tiny?seed=0)")
    p.add_argument("--out", default="results/cache_hit", metavar="DIR")
    p.add_argument("--preset", choices=("full", "small"),
                   help="full: the seed's matrix (default on a GPU); small: CPU-sized")
    p.add_argument("--modes", default="det,stock", help="det and/or stock (default both)")
    p.add_argument("--engines", default="eager,graph",
                   help="eager, graph (CUDA only), eager-chunkN, graph-chunkN; comma-separated "
                        "(default eager,graph)")
    for name in ("prefixes", "batches"):
        p.add_argument(f"--{name}", metavar="N,N", help=f"override the preset's {name}")
    for name in ("repetitions", "suffix", "max-new-tokens", "page-size", "seed"):
        p.add_argument(f"--{name}", type=int, metavar="N", help=f"override the preset's {name}")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.set_defaults(handler=run)


def _variants(text: str):
    from det_suite.checks.cache_hit import EngineVariant

    out = []
    for label in (v.strip() for v in text.split(",") if v.strip()):
        kind, _, chunk = label.partition("-chunk")
        if kind not in ("eager", "graph") or (chunk and not chunk.isdigit()):
            raise ValueError(f"engines: expected eager, graph, eager-chunkN or graph-chunkN, "
                             f"got {label!r}")
        out.append(EngineVariant(cuda_graph=kind == "graph",
                                 chunk_size=int(chunk) if chunk else None))
    if not out:
        raise ValueError("engines: expected at least one engine")
    return tuple(out)


def settings_from_args(args):
    import torch

    from det_suite.checks.cache_hit import PRESETS, CacheHitSettings

    preset = args.preset or ("full" if torch.cuda.is_available() else "small")
    values = dict(PRESETS[preset])
    if args.prefixes:
        values["prefixes"] = _ints(args.prefixes, "prefixes")
    if args.batches:
        values["batches"] = _ints(args.batches, "batches")
    for name in ("repetitions", "suffix", "max_new_tokens", "page_size"):
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    return CacheHitSettings(
        model=args.model, backend=args.backend,
        modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()),
        variants=_variants(args.engines), seed=args.seed or 0, device=args.device,
        progress=lambda line: print(line, flush=True), **values)


def run(args) -> int:
    from det_suite.checks.cache_hit import run_cache_hit
    from det_suite.checks.cache_hit_report import verdict_lines, write_report
    from det_suite.reports.environment import environment

    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        print(f"cache-hit: {exc}", file=sys.stderr)
        return 2
    print(f"cache-hit: {settings.model} on {settings.backend}, modes {settings.modes}, "
          f"prefixes {settings.prefixes} x batches {settings.batches} x "
          f"{settings.repetitions} reps", flush=True)
    result = run_cache_hit(settings)
    out = write_report(result, args.out, environment())
    for line in verdict_lines(result):
        print(f"cache-hit: {line}")
    print(f"cache-hit: {'OK' if result.exit_code == 0 else 'FAILED'}; results in {out}")
    return result.exit_code
