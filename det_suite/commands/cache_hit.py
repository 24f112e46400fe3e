"""`det-suite cache-hit`: the same selected-token logprobs cold and after a prefix-cache hit.

Runs the seed's matrix (prefix 128 / 1024 / 4096 x batch 1 / 4 / 2 x 2 repetitions) for det
mode and the stock control: flush, the target prompt cold, a primer that caches its prefix,
the target again (a hit: cached tokens must be > 0) and a warm repeat, each among other
requests; eager and CUDA Graph engines (graph on CUDA only for the embedded engine), and
optional chunked-prefill engines. --backend embedded: det-suite's own engine. --backend
sglang: an SGLang server per mode and engine (det = with det-suite's plugin, stock = the
upstream arm; both with --enable-deterministic-inference), or the running server at
--server-url (then name its arm with --modes). Writes cache_hit.json (raw values) and
cache_hit.md into --out (server logs into --work-dir). Exit 0 when det mode is exact
everywhere with every hit proven and the m-dependent positive control (embedded engine) is
flagged, 1 otherwise, 2 for a usage error. --preset small is the
CPU-sized version (the default for the embedded engine without a GPU).
"""

from __future__ import annotations

import sys
from pathlib import Path

LAUNCH_OPTIONS = ("attention_backend", "tp_size", "dp_size", "server_arg", "server_python",
                  "health_timeout")


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated ints, got {text!r}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "cache-hit", help="cold vs prefix-cache-hit logprobs, bit for bit (embedded or sglang)",
        description=__doc__.split("\n\n")[1])
    p.add_argument("--backend", default="embedded", choices=("embedded", "sglang"))
    p.add_argument("--model", default="synthetic:tiny?seed=0",
                   help="PATH, hub id or synthetic:<preset>?seed=S (default "
                        "synthetic:tiny?seed=0)")
    p.add_argument("--out", default="results/cache_hit", metavar="DIR")
    p.add_argument("--preset", choices=("full", "small"),
                   help="full: the seed's matrix (default on a GPU); small: CPU-sized")
    p.add_argument("--modes", help="det, stock and/or m-dependent, the positive control "
                                   "(default: all three on the embedded engine, det and stock "
                                   "on sglang; with --server-url, "
                                   "required: the arm that server is)")
    p.add_argument("--engines",
                   help="eager, graph (CUDA only), eager-chunkN, graph-chunkN; comma-separated "
                        "(default eager,graph; with --server-url, graph)")
    for name in ("prefixes", "batches"):
        p.add_argument(f"--{name}", metavar="N,N", help=f"override the preset's {name}")
    for name in ("repetitions", "suffix", "max-new-tokens", "page-size", "seed"):
        p.add_argument(f"--{name}", type=int, metavar="N", help=f"override the preset's {name}")
    p.add_argument("--device", help="embedded: cuda or cpu (default: cuda when available)")
    sg = p.add_argument_group("sglang backend")
    sg.add_argument("--server-url", metavar="URL",
                    help="attach to a running SGLang server (http://HOST:PORT) instead of "
                         "booting one per mode and engine")
    sg.add_argument("--work-dir", metavar="DIR",
                    help="server logs and written synthetic checkpoints (default OUT/sglang)")
    sg.add_argument("--attention-backend", help="launch: attention backend (default triton)")
    sg.add_argument("--tp-size", type=int, metavar="N",
                    help="launch: tensor parallel GPUs per server (default 1; docs/sglang.md, "
                         "multi-GPU)")
    sg.add_argument("--dp-size", type=int, metavar="N",
                    help="launch: data parallel replicas per server (default 1)")
    sg.add_argument("--server-arg", action="append", metavar="ARG",
                    help="launch: one more argument for sglang.launch_server, verbatim "
                         "(repeatable; write --server-arg=--mem-fraction-static=0.8)")
    sg.add_argument("--server-python", metavar="PATH",
                    help="launch: the interpreter with sglang (default: this one)")
    sg.add_argument("--health-timeout", type=float, metavar="S",
                    help="launch: seconds to wait for a healthy server (default 1800)")
    sg.add_argument("--request-timeout", type=float, metavar="S",
                    help="seconds per HTTP request (default 600)")
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


def _backend_options(args) -> dict:
    """open_backend's options from the sglang flags; refused where they mean nothing."""
    given = [name for name in LAUNCH_OPTIONS if getattr(args, name) is not None]
    sglang_only = given + [n for n in ("server_url", "work_dir", "request_timeout")
                           if getattr(args, n) is not None]
    if args.backend != "sglang":
        if sglang_only:
            raise ValueError(f"--{sglang_only[0].replace('_', '-')}: only for --backend sglang")
        return {}
    if args.server_url is not None and given:
        raise ValueError(f"--{given[0].replace('_', '-')}: a server at --server-url was "
                         "launched already; launch options do not apply")
    options = {}
    if args.request_timeout is not None:
        options["request_timeout"] = args.request_timeout
    if args.server_url is None:
        options["work_dir"] = args.work_dir or str(Path(args.out) / "sglang")
        for name, key in (("attention_backend", "attention_backend"), ("tp_size", "tp_size"),
                          ("dp_size", "dp_size"), ("server_python", "python"),
                          ("health_timeout", "health_timeout")):
            if getattr(args, name) is not None:
                options[key] = getattr(args, name)
        if args.server_arg:
            options["extra_args"] = tuple(args.server_arg)
    return options


def settings_from_args(args):
    import torch

    from det_suite.checks.cache_hit import PRESETS, CacheHitSettings

    if args.server_url is not None and args.modes is None:
        raise ValueError("--modes: with --server-url, name the arm that server is: det (with "
                         "det-suite's plugin) or stock (upstream)")
    options = _backend_options(args)
    on_gpu = torch.cuda.is_available() or args.backend == "sglang"
    preset = args.preset or ("full" if on_gpu else "small")
    values = dict(PRESETS[preset])
    if args.prefixes:
        values["prefixes"] = _ints(args.prefixes, "prefixes")
    if args.batches:
        values["batches"] = _ints(args.batches, "batches")
    for name in ("repetitions", "suffix", "max_new_tokens", "page_size"):
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    engines = args.engines or ("graph" if args.server_url else "eager,graph")
    return CacheHitSettings(
        model=args.model, backend=args.backend,
        modes=(None if args.modes is None
               else tuple(m.strip() for m in args.modes.split(",") if m.strip())),
        variants=_variants(engines), seed=args.seed or 0, device=args.device,
        server_url=args.server_url, backend_options=options,
        progress=lambda line: print(line, flush=True), **values)


def run(args) -> int:
    from det_suite.backends.sglang.client import SGLangError as BackendError
    from det_suite.checks.cache_hit import run_cache_hit
    from det_suite.checks.cache_hit_report import verdict_lines, write_report
    from det_suite.reports.environment import environment

    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        print(f"cache-hit: {exc}", file=sys.stderr)
        return 2
    where = settings.backend + (f" at {settings.server_url}" if settings.server_url else "")
    print(f"cache-hit: {settings.model} on {where}, modes {settings.modes}, "
          f"prefixes {settings.prefixes} x batches {settings.batches} x "
          f"{settings.repetitions} reps", flush=True)
    from det_suite.backends.sglang.server import SGLangRoutingError
    try:
        result = run_cache_hit(settings)
    except SGLangRoutingError as exc:
        # The det arm is not what it claims: nothing was measured, so no verdict (exit 2).
        print(f"cache-hit: {exc}", file=sys.stderr)
        return 2
    except BackendError as exc:
        print(f"cache-hit: {settings.backend} backend failed: {exc}", file=sys.stderr)
        return 1
    out = write_report(result, args.out, environment())
    for line in verdict_lines(result):
        print(f"cache-hit: {line}")
    print(f"cache-hit: {'OK' if result.exit_code == 0 else 'FAILED'}; results in {out}")
    return result.exit_code
