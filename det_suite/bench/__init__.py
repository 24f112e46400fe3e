"""Benchmarks: timing primitives (`timing`, `noop_kernel`), the FP8 GEMM benchmark against
vendor GEMMs (`gemm`, a package) and end-to-end A/B timing across engine boots (`e2e`,
issue 15). Everything that times needs a CUDA GPU: speed claims never come from Triton's
interpreter. The pure logic (shape parsing, summaries, tables, accuracy checks) runs
anywhere so CPU CI can test it."""

# Timing modes, importable without torch (the CLI registers its options from them).
MODES = ("warm", "flush", "graph")
MODE_DESCRIPTIONS = {
    "warm": "L2 warm: back-to-back calls on the same operands, padded so launch gaps hide",
    "flush": "L2 flushed before every call (do_bench's 256 MiB buffer zeroed), padded",
    "graph": "CUDA Graph: N calls captured back to back, replay time / N (L2 warm)",
}
