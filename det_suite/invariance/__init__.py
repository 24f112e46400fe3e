"""Batch-invariance harness: FP8 linear providers compared bit for bit across row counts.

One module per job:

- `providers`  the FP8 linear implementations behind one op-level call signature, each
               with what it claims (invariant, or a positive control expected to vary)
- `cases`      shapes, the row-count (M) boundary sets, the case matrix, and the inputs
- `compare`    one bit-exact comparison and the per-case comparison routines (cached
               suffix, batch composition, pipeline A/B)
- `graph`      CUDA Graph capture and replay against eager
- `schedule`   the reduction schedule a launch config implies, and a CPU emulation of
               the kernel's arithmetic under it (the kernel must equal it bit for bit)
- `runner`     drives a matrix of cases over providers, with progress on stderr
- `verdict`    per-provider verdicts and the exit code
- `report`     table, JSON, Markdown and heatmap
- `harness`    the whole run as a library call: `run_invariance(InvarianceSettings)`

`det-suite invariance` (det_suite/commands/invariance.py) is its command-line shell. The
CPU interpreter's GPU-faithful numerics live in `det_suite.platform`.
"""
