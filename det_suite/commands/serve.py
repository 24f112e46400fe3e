"""`det-suite serve`: the embedded engine over the part of SGLang's native HTTP API the
checks use (/generate with logprobs, /flush_cache, /health, /health_generate, /model_info).

An SGLang client, or `det-suite cache-hit --backend sglang --server-url URL --modes MODE`,
then runs against det-suite's own engine: the same check, two engines, one protocol.
Greedy, forced-length requests only; anything else is refused with HTTP 400. Runs until
Ctrl-C. Exit 2 for a usage error.
"""

from __future__ import annotations

import sys
import time


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="the embedded engine behind SGLang's native HTTP API subset",
        description=__doc__.split("\n\n")[1])
    p.add_argument("--model", default="synthetic:tiny?seed=0",
                   help="PATH, hub id or synthetic:<preset>?seed=S (default "
                        "synthetic:tiny?seed=0)")
    p.add_argument("--mode", default="det", choices=("det", "stock"),
                   help="det: det-suite's kernels; stock: the torch/vendor control")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--cuda-graph", action="store_true", help="CUDA Graph decode (CUDA only)")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--num-pages", type=int, default=None,
                   help="KV cache pages (default: 512 on a CPU, sized to memory on a GPU); a "
                        "batch that does not fit runs in waves, as SGLang queues it")
    p.set_defaults(handler=run)


def run(args) -> int:
    import torch

    from det_suite.backends.sglang.serve import open_engine_server

    if not 0 <= args.port < 65536 or args.page_size < 1 or (args.num_pages is not None
                                                           and args.num_pages < 1):
        print(f"serve: --port must be in [0, 65535], --page-size and --num-pages >= 1, got "
              f"{args.port} / {args.page_size} / {args.num_pages}", file=sys.stderr)
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.cuda_graph and not device.startswith("cuda"):
        print("serve: --cuda-graph needs a CUDA device", file=sys.stderr)
        return 2
    server = open_engine_server(args.model, mode=args.mode, device=device,
                                cuda_graph=args.cuda_graph, page_size=args.page_size,
                                num_pages=args.num_pages, host=args.host, port=args.port)
    backend = server.backend
    with server:
        print(f"serve: {args.model} ({args.mode} mode, {device}) at {server.url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("serve: stopped", file=sys.stderr)
            return 130
        finally:
            backend.close()
