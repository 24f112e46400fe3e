"""Embedded engine: batch-invariant mode, paged KV cache with a prefix cache, CUDA Graph decode (issue 12)."""
