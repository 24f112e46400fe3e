"""One module per `det-suite` subcommand; each defines `register(subparsers)` that adds its
parser and sets `handler` to a function returning the exit code. Keep imports of torch and
kernels inside handlers so `det-suite --help` stays fast."""
