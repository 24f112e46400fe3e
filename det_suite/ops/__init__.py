"""Public ops: `fp8_linear`, `fp8_scaled_mm`, `quantize_fp8` (`ops.linear`), their argument
checks (`ops.validation`), how each kernel is launched, as data (`ops.launch_spec`), and the
launcher that binds that description to tensors (`ops.launch`).

Importing this package throws the interpreter switch first (`platform.interpreter.
default_for_library`): Triton fixes compiled-vs-interpreted when its jitted modules are
imported, which the imports below do, so on a torch without CUDA a plain
`from det_suite.ops import fp8_linear` runs the kernels on the GPU-faithful interpreter.
"""

from det_suite.platform import interpreter as _interpreter

# Importing must never fail: a Triton whose interpreter cannot be made GPU-faithful is
# named by require_kernel_device at the first launch instead.
try:
    _interpreter.default_for_library()
except Exception:  # noqa: BLE001 - see above
    pass

from det_suite.ops.launch import (Launcher, compile_kernel, launch_fp8_gemm, launch_quantize,
                                  run_kernel, split_k_counters)
from det_suite.ops.launch_spec import (GemmLaunchSpec, KernelCall, LaunchArg, gemm_launch_spec,
                                       quantize_launch_spec, selects_tma, tma_compatible,
                                       triton_cdiv)
from det_suite.ops.linear import (fp8_linear, fp8_scaled_mm, fp8_scaled_mm_segmented,
                                  quantize_fp8, segments_fit)
from det_suite.ops.validation import (ACTIVATION_DTYPES, FP8_DTYPE, WeightLayout, resolve_weight,
                                      validate_scale)

__all__ = ["ACTIVATION_DTYPES", "FP8_DTYPE", "GemmLaunchSpec", "KernelCall", "LaunchArg",
           "Launcher", "WeightLayout", "compile_kernel", "fp8_linear", "fp8_scaled_mm",
           "fp8_scaled_mm_segmented", "segments_fit",
           "gemm_launch_spec", "launch_fp8_gemm", "launch_quantize", "quantize_fp8",
           "quantize_launch_spec", "resolve_weight", "run_kernel", "selects_tma",
           "split_k_counters", "tma_compatible", "triton_cdiv", "validate_scale"]
