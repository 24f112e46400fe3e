"""End-to-end A/B timing across engine boots with a thermal gate (issue 15)."""
