"""Embedded engine: batch-invariant mode, paged KV cache with a prefix cache, CUDA Graph decode (issue 12)."""

from det_suite.engine.engine import Engine
from det_suite.engine.opsets import OpSet, det_opset, opset_for, stock_opset

__all__ = ["Engine", "OpSet", "det_opset", "opset_for", "stock_opset"]
