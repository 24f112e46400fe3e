"""Synthetic checkpoints in the real ModelOpt FP8 layout, with calibrated static scales and a self-contained tokenizer (issue 12)."""
