"""On the CPU, make the Triton interpreter compute what a GPU computes, bit for bit.

Three of the interpreter's numerics differ from every GPU's, and `gpu_faithful_interpreter()`
replaces them for as long as it is active:

1. tl.dot (below): numpy's matmul is not row-count invariant.
2. FP8 NaN in tl.dot: the interpreter widens e4m3fn to fp16 with no NaN case (0x7f becomes
   480.0); the replacement keeps it NaN, so a NaN activation poisons its row as on a GPU.
3. fp32 -> bf16 casts: Triton 3.6's interpreter truncates the mantissa (round toward zero),
   where the GPU's `cvt.rn.bf16.f32` rounds to nearest even; half the BF16 outputs of a CPU
   run would be one ulp off the GPU's and off torch's. The replacement rounds to nearest
   even with a carry into the exponent and keeps NaN a (quiet) NaN, as the GPU does.

tl.dot in detail:

Triton 3.6's interpreter evaluates `tl.dot(a, b, acc)` as `acc + np.matmul(a, b)`, and numpy
hands the product to OpenBLAS, whose kernels order a row's sum by the number of rows in the
call: with numpy 2.2.6's OpenBLAS 0.3.29 (Haswell kernels, even single-threaded) the rows of
a 16-row product differ in the last bits from the same rows inside a 128-row product. Any
table whose BLOCK_M follows M would then look non-invariant on the CPU for a reason no GPU
has (an MMA instruction's arithmetic for one output never depends on the other rows), and
no check could tell a kernel's schedule from numpy's. The pytest plugin and the CLI install
it for the whole run whenever the interpreter is active.

While `fixed_order_dot()` is active the interpreter computes the same `acc + a @ b`, with the
tile product summed in fp32 in ascending k (`t += a[:, k] * b[k, :]`). FP8/FP16/BF16
products are exact in fp32, so this is a plain ordered sum, identical for every BLOCK_M.
Everything the kernel's schedule decides (BLOCK_K, the K-chunk partition, the order chunks
are combined in) still changes the grouping of the sum, so the positive control still
differs. It is also faster than numpy's cast-then-matmul for tiles of 64+ rows.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from det_suite.platform.interpreter import interpreter_active

NOTE = ("Triton interpreter made GPU-faithful by det-suite: tl.dot summed in a fixed order "
        "(ascending k, fp32; numpy's OpenBLAS matmul is not row-count invariant) and fp32 -> "
        "bf16 casts rounded to nearest even (the interpreter truncates)")


def _builder_class():
    from triton.runtime import interpreter

    cls = getattr(interpreter, "InterpreterBuilder", None)
    if cls is None or not all(hasattr(cls, name) for name in ("create_dot", "cast_impl")) \
            or not hasattr(interpreter, "_convert_float"):
        raise RuntimeError("this Triton's interpreter has no InterpreterBuilder.create_dot/"
                           "cast_impl/_convert_float; det_suite/interpreter.py needs "
                           "updating for it")
    return interpreter, cls


def _ordered_product(a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
    a = a.astype(dtype, copy=False)
    b = b.astype(dtype, copy=False)
    total = np.zeros(a.shape[:-1] + b.shape[-1:], dtype=dtype)
    for k in range(a.shape[-1]):
        total += a[..., :, k:k + 1] * b[..., k:k + 1, :]
    return total


def round_fp32_to_bf16_bits(data: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) of float32 values, rounded to nearest even like
    `cvt.rn.bf16.f32`: NaN stays NaN (quieted, sign kept), overflow rounds to +-Inf."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    lsb = (bits >> 16) & 1
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> 16).astype(np.uint16)
    is_nan = np.isnan(data)
    quiet_nan = ((bits >> 16) | 0x0040).astype(np.uint16)
    return np.where(is_nan, quiet_nan, rounded)


def _widen_fp8(interpreter, data: np.ndarray, dtype) -> np.ndarray:
    """FP8 storage widened to FP16 as the interpreter does (exact for finite values), with
    e4m3fn's NaN (0x7f / 0xff) kept NaN: the interpreter's conversion has no NaN case and
    turns it into 480.0, so a NaN activation would give a finite output row on the CPU."""
    widened = interpreter._convert_float(data, dtype, interpreter.tl.float16, None).view(
        np.float16)
    if dtype == interpreter.tl.float8e4nv:
        widened = np.where((data.view(np.uint8) & 0x7F) == 0x7F, np.float16(np.nan), widened)
    return widened


def _widen_bf16(data: np.ndarray, dtype) -> np.ndarray:
    """bf16 storage (uint16 bits) as exact float32 values, subnormals included."""
    if str(dtype) != "bf16":
        return data
    return (data.astype(np.uint32) << 16).view(np.float32)


@contextmanager
def gpu_faithful_interpreter():
    """Yields True while the three replacements (ordered dot with FP8 NaN kept, bf16
    rounding) are installed; False (and changes nothing) when the interpreter is not
    active."""
    if not interpreter_active():
        yield False
        return
    interpreter, cls = _builder_class()
    original = cls.create_dot
    original_cast = cls.cast_impl
    tl = interpreter.tl

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        acc_dtype = d.data.dtype
        if not np.issubdtype(acc_dtype, np.floating):
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        a_data, b_data = a.data, b.data
        # As the interpreter does: FP8 storage is widened to FP16 first (exactly).
        if (a.dtype.primitive_bitwidth == 8 and a.dtype.is_floating()) or \
                (b.dtype.primitive_bitwidth == 8 and b.dtype.is_floating()):
            a_data = _widen_fp8(interpreter, a_data, a.dtype)
            b_data = _widen_fp8(interpreter, b_data, b.dtype)
        # The interpreter keeps bf16 as its raw uint16 bits and its own dot multiplies
        # those integers; bf16 is the top half of an fp32, so widen by a 16-bit shift.
        a_data, b_data = _widen_bf16(a_data, a.dtype), _widen_bf16(b_data, b.dtype)
        product = _ordered_product(a_data, b_data, acc_dtype)
        return interpreter.TensorHandle(product + d.data, d.dtype.scalar)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(round_fp32_to_bf16_bits(src.data), dst_type.scalar)
        return original_cast(self, src, dst_type)

    cls.create_dot = create_dot
    cls.cast_impl = cast_impl
    try:
        yield True
    finally:
        cls.create_dot = original
        cls.cast_impl = original_cast


# The name the pytest plugin and older callers use.
fixed_order_dot = gpu_faithful_interpreter
