"""FP8 GEMM benchmark: det-suite's `fp8_scaled_mm` against every vendor GEMM available here,
same process, same quantized operands, every output checked before it is timed.

- `shapes`: GemmShape, the presets (from the shape catalog), parsing shapes and M;
- `operands`: random FP8 operands with no zeros, scales;
- `accuracy`: the accuracy check in front of every timing;
- `results`: CellResult, ModeSummary, BenchRun (and its JSON), floors, the speed gate;
- `render`: the per-mode text table and the Markdown report;
- `run`: one cell (`measure_cell`) and the run on a GPU (`run_gemm_bench`);
- `pinned`: `--config`, one launch config pinned for every cell;
- `job`: `det-suite bench gemm` as a library call (`bench_gemm(GemmBenchSettings)`).

Everything importable here without torch; only timing and running need a CUDA GPU.
"""

from det_suite.bench.gemm.accuracy import MAX_ABS_TOL, REL_FRO_TOL, Accuracy, check_accuracy
from det_suite.bench.gemm.job import (BenchUsageError, GemmBenchPlan, GemmBenchResult,
                                      GemmBenchSettings, bench_gemm, plan_gemm_bench)
from det_suite.bench.gemm.operands import random_fp8, scale_tensor
from det_suite.bench.gemm.pinned import config_fields, config_policy, parse_config_spec
from det_suite.bench.gemm.render import config_text, format_markdown, format_mode_table
from det_suite.bench.gemm.results import (FLOOR_GATE_MAX_M, FLOOR_MAX_M, REFERENCE_VENDOR,
                                          SCHEMA, BenchRun, CellResult, ModeSummary,
                                          gate_failures, geometric_mean, summarize,
                                          weight_floor_us)
from det_suite.bench.gemm.run import DEFAULT_MODES, measure_cell, run_gemm_bench
from det_suite.bench.gemm.shapes import (DEFAULT_MS, SHAPE_PRESETS, GemmShape, parse_ms,
                                         parse_shape, parse_shapes)

__all__ = [
    "MAX_ABS_TOL", "REL_FRO_TOL", "Accuracy", "check_accuracy",
    "BenchUsageError", "GemmBenchPlan", "GemmBenchResult", "GemmBenchSettings", "bench_gemm",
    "plan_gemm_bench",
    "random_fp8", "scale_tensor",
    "config_fields", "config_policy", "parse_config_spec",
    "config_text", "format_markdown", "format_mode_table",
    "FLOOR_GATE_MAX_M", "FLOOR_MAX_M", "REFERENCE_VENDOR", "SCHEMA", "BenchRun", "CellResult",
    "ModeSummary", "gate_failures", "geometric_mean", "summarize", "weight_floor_us",
    "DEFAULT_MODES", "measure_cell", "run_gemm_bench",
    "DEFAULT_MS", "SHAPE_PRESETS", "GemmShape", "parse_ms", "parse_shape", "parse_shapes",
]
