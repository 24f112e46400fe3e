"""The embedded engine as a backend (issue 12)."""
