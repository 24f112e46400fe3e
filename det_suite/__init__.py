"""det-suite: batch-invariant FP8 linears and the evidence machinery around them."""

__version__ = "0.1.0"
