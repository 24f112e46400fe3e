"""Public ops: `fp8_linear`, `fp8_scaled_mm`, `quantize_fp8` (`ops.linear`), their argument
checks (`ops.validation`), how each kernel is launched, as data (`ops.launch_spec`), and the
launcher that binds that description to tensors (`ops.launch`)."""

from det_suite.ops.launch import (Launcher, compile_kernel, launch_fp8_gemm, launch_quantize,
                                  run_kernel, split_k_counters)
from det_suite.ops.launch_spec import (GemmLaunchSpec, KernelCall, LaunchArg, gemm_launch_spec,
                                       quantize_launch_spec, selects_tma, tma_compatible,
                                       triton_cdiv)
from det_suite.ops.linear import fp8_linear, fp8_scaled_mm, quantize_fp8
from det_suite.ops.validation import (ACTIVATION_DTYPES, FP8_DTYPE, WeightLayout, resolve_weight,
                                      validate_scale)

__all__ = ["ACTIVATION_DTYPES", "FP8_DTYPE", "GemmLaunchSpec", "KernelCall", "LaunchArg",
           "Launcher", "WeightLayout", "compile_kernel", "fp8_linear", "fp8_scaled_mm",
           "gemm_launch_spec", "launch_fp8_gemm", "launch_quantize", "quantize_fp8",
           "quantize_launch_spec", "resolve_weight", "run_kernel", "selects_tma",
           "split_k_counters", "tma_compatible", "triton_cdiv", "validate_scale"]
