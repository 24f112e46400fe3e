"""Numeric constants shared by the FP8 kernels and their references."""

# Largest finite float8_e4m3fn value; static per-tensor quantization clamps to +-this.
FP8_E4M3_MAX = 448.0
