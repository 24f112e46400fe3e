"""Qwen3 dense decoder whose FP8 linears go through det_suite.ops, batch-invariant end to end (issue 12)."""
