"""Results leaving det-suite: environment capture (`environment`), source and revision
hashes (`provenance`), atomic writes (`files`), tables (`tables`), the committed GPU
evidence and the README claims generated from it (`evidence`). The cross-check
reproducibility report lands here too (issue 15)."""
