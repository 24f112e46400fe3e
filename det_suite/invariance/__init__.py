"""Batch-invariance harness: FP8 linear providers compared bit for bit across row counts.

One module per job:

- `providers`  the FP8 linear implementations behind one op-level call signature, each
               with what it claims (invariant, or a positive control expected to vary)
- `cases`      shapes, the row-count (M) boundary sets, the case matrix, and the inputs
- `compare`    one bit-exact comparison and the per-case comparison routines (cached
               suffix, batch composition, pipeline A/B)
- `graph`      CUDA Graph capture and replay against eager
- `interpreter` on the CPU, a fixed-order tl.dot for the Triton interpreter (numpy's BLAS
               is not row-count invariant)
- `runner`     drives a matrix of cases over providers, with progress on stderr
- `verdict`    per-provider verdicts and the exit code
- `report`     table, JSON, Markdown and heatmap

`det-suite invariance` (det_suite/commands/invariance.py) is the command-line front end.
"""
