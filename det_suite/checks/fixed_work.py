"""Fixed-work comparison: texts and token sequences exact between any two runs of a check (issue 13)."""
