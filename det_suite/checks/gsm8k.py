"""GSM8K text-hash fixtures: record and check texts and token sequences per row (issue 13)."""
