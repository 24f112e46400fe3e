"""On the CPU, make the Triton interpreter compute what a GPU computes, bit for bit.

Four of the interpreter's numerics differ from every GPU's. `install()` replaces them on
Triton's `InterpreterBuilder` for the rest of the process; the interpreter switch
(`platform.interpreter`) calls it whenever det-suite finds or turns the interpreter on, so
every CPU run (library, CLI, pytest) gets the same numerics and no caller has to ask.

1. tl.dot (below): numpy's matmul is not row-count invariant.
2. FP8 NaN in tl.dot: the interpreter widens e4m3fn to fp16 with no NaN case (0x7f becomes
   480.0); the replacement keeps it NaN, so a NaN activation poisons its row as on a GPU.
3. bf16 casts: Triton 3.6's interpreter narrows fp32 -> bf16 by truncating the mantissa
   (round toward zero), where the GPU's `cvt.rn.bf16.f32` rounds to nearest even; half the
   BF16 outputs of a CPU run would be one ulp off the GPU's and off torch's. The
   replacement rounds to nearest even with a carry into the exponent and keeps NaN a
   (quiet) NaN, as the GPU does. Widening bf16 (-> fp32, and through fp32 to anything
   else) is a 16-bit shift, exact for subnormals, which the interpreter's conversion loses.
4. tl.maximum / tl.minimum without `propagate_nan` (LLVM maxnum/minnum, PTX max.f32 /
   min.f32): the GPU returns the operand that is not NaN; the interpreter's np.maximum
   returns the NaN. The replacement uses np.fmax / np.fmin, so a kernel that lets NaN
   through a clamp only on the CPU is caught on the CPU.

And one the interpreter lacks altogether: libdevice (`triton.language.extra.libdevice`), an
extern library it cannot call. `libdevice.exp` on fp32 (CUDA's accurate expf, which torch's
CUDA kernels call, e.g. in silu) is evaluated as exp in float64 rounded once to fp32: the
correctly rounded expf. That is the one numeric here that is not the GPU's bit for bit:
CUDA's expf is within 2 ulp of it (its core is the `ex2.approx` instruction, which no CPU
reproduces), so a CPU run checks a kernel's arithmetic around the exp, and a GPU test its
exp. torch's CPU silu (Sleef's exp in its AVX2 kernels, glibc's in the default ones and in
every scalar tail) agrees with it after rounding to bf16/fp16 for every bf16 and fp16 input;
numpy's fp32 exp does not (three fp16 inputs, e.g. -0.7138671875), hence float64.

tl.dot in detail:

Triton 3.6's interpreter evaluates `tl.dot(a, b, acc)` as `acc + np.matmul(a, b)`, and numpy
hands the product to OpenBLAS, whose kernels order a row's sum by the number of rows in the
call: with numpy 2.2.6's OpenBLAS 0.3.29 (Haswell kernels, even single-threaded) the rows of
a 16-row product differ in the last bits from the same rows inside a 128-row product. Any
table whose BLOCK_M follows M would then look non-invariant on the CPU for a reason no GPU
has (an MMA instruction's arithmetic for one output never depends on the other rows), and
no check could tell a kernel's schedule from numpy's.

The replacement computes the same `acc + a @ b`, with the tile product summed in fp32 in
ascending k (`t += a[:, k] * b[k, :]`). FP8/FP16/BF16 products are exact in fp32, so this is
a plain ordered sum, identical for every BLOCK_M. Everything the kernel's schedule decides
(BLOCK_K, the K-chunk partition, the order chunks are combined in) still changes the
grouping of the sum, so the positive control still differs. It is also faster than numpy's
cast-then-matmul for tiles of 64+ rows.

Only the interpreter's builder and libdevice's stub module (which compiled kernels never
call: compiling resolves it to the CUDA library) are touched, so compiled (GPU) kernels are
unaffected.
"""

from __future__ import annotations

import threading

import numpy as np

NOTE = ("Triton interpreter made GPU-faithful by det-suite: tl.dot summed in a fixed order "
        "(ascending k, fp32; numpy's OpenBLAS matmul is not row-count invariant), FP8 NaN kept "
        "NaN in tl.dot, bf16 casts rounded to nearest even (the interpreter truncates), and "
        "NaN-ignoring max/min as on a GPU")

_REQUIRED = ("create_dot", "cast_impl")
_NAN_IGNORING = {"create_maxnumf": np.fmax, "create_minnumf": np.fmin}
_lock = threading.Lock()
_originals: dict[str, object] = {}


def _interpreter_module():
    from triton.runtime import interpreter

    cls = getattr(interpreter, "InterpreterBuilder", None)
    if cls is None or not all(hasattr(cls, name) for name in _REQUIRED) \
            or not hasattr(interpreter, "_convert_float"):
        raise RuntimeError("this Triton's interpreter has no InterpreterBuilder.create_dot/"
                           "cast_impl/_convert_float; det_suite/platform/"
                           "gpu_faithful_interpreter.py needs updating for it")
    return interpreter


def installed() -> bool:
    """Whether this process's interpreter computes GPU-faithful numerics."""
    return bool(_originals)


def install() -> None:
    """Replace the interpreter's numerics for the rest of the process; idempotent and
    thread-safe. Raises RuntimeError for a Triton whose interpreter has changed shape."""
    with _lock:
        if _originals:
            return
        interpreter = _interpreter_module()
        cls = interpreter.InterpreterBuilder
        replacements = {"create_dot": _create_dot, "cast_impl": _cast_impl}
        for name, numpy_op in _NAN_IGNORING.items():
            if hasattr(cls, name):  # float max/min without NaN propagation
                replacements[name] = _nan_ignoring(numpy_op)
        for name, replacement in replacements.items():
            _originals[name] = getattr(cls, name)
            setattr(cls, name, replacement)
        _install_libdevice()


def _install_libdevice() -> None:
    # The stubs are resolved to the CUDA library only when a kernel is compiled; an
    # interpreted kernel calls the stub itself, whose body is `...`.
    from triton.language.extra import libdevice

    _originals["libdevice.exp"] = libdevice.exp
    libdevice.exp = _libdevice_exp


def _libdevice_exp(arg0, _semantic=None):
    """libdevice's expf, correctly rounded (see the module docstring)."""
    from triton.runtime import interpreter

    tl = interpreter.tl
    if not isinstance(arg0, tl.tensor) or arg0.dtype != tl.float32:
        raise NotImplementedError("det-suite's interpreter evaluates libdevice.exp on fp32 "
                                  f"tensors only; got {arg0!r}")
    # Overflow to inf and underflow to 0 are expf's results too: nothing to warn about.
    with np.errstate(over="ignore", under="ignore"):
        data = np.exp(np.asarray(arg0.handle.data, dtype=np.float64)).astype(np.float32)
    return tl.tensor(interpreter.TensorHandle(data, tl.float32), arg0.type)


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


def widen_bf16_bits(data: np.ndarray) -> np.ndarray:
    """float32 values of bf16 bit patterns (uint16): exact, subnormals and NaN included."""
    return (np.asarray(data).astype(np.uint32) << 16).view(np.float32)


def _widen_fp8(interpreter, data: np.ndarray, dtype) -> np.ndarray:
    """FP8 storage widened to FP16 as the interpreter does (exact for finite values), with
    e4m3fn's NaN (0x7f / 0xff) kept NaN: the interpreter's conversion has no NaN case and
    turns it into 480.0, so a NaN activation would give a finite output row on the CPU."""
    widened = interpreter._convert_float(data, dtype, interpreter.tl.float16, None).view(
        np.float16)
    if dtype == interpreter.tl.float8e4nv:
        widened = np.where((data.view(np.uint8) & 0x7F) == 0x7F, np.float16(np.nan), widened)
    return widened


def _create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    from triton.runtime import interpreter

    acc_dtype = d.data.dtype
    if not np.issubdtype(acc_dtype, np.floating):
        return _originals["create_dot"](self, a, b, d, input_precision, max_num_imprecise_acc)
    a_data, b_data = a.data, b.data
    # As the interpreter does: FP8 storage is widened to FP16 first (exactly).
    if (a.dtype.primitive_bitwidth == 8 and a.dtype.is_floating()) or \
            (b.dtype.primitive_bitwidth == 8 and b.dtype.is_floating()):
        a_data = _widen_fp8(interpreter, a_data, a.dtype)
        b_data = _widen_fp8(interpreter, b_data, b.dtype)
    # The interpreter keeps bf16 as its raw uint16 bits and its own dot multiplies those
    # integers.
    tl = interpreter.tl
    if a.dtype.scalar == tl.bfloat16:
        a_data = widen_bf16_bits(a_data)
    if b.dtype.scalar == tl.bfloat16:
        b_data = widen_bf16_bits(b_data)
    product = _ordered_product(a_data, b_data, acc_dtype)
    return interpreter.TensorHandle(product + d.data, d.dtype.scalar)


def _cast_impl(self, src, dst_type):
    from triton.runtime import interpreter

    tl = interpreter.tl
    src_type, dst = src.dtype.scalar, dst_type.scalar
    if src_type == tl.float32 and dst == tl.bfloat16:
        return interpreter.TensorHandle(round_fp32_to_bf16_bits(src.data), dst)
    if src_type == tl.bfloat16 and dst != tl.bfloat16:
        widened = interpreter.TensorHandle(widen_bf16_bits(src.data), tl.float32)
        return widened if dst == tl.float32 else _originals["cast_impl"](self, widened, dst_type)
    return _originals["cast_impl"](self, src, dst_type)


def _nan_ignoring(numpy_op):
    def replacement(self, lhs, rhs):
        return self.binary_op(lhs, rhs, numpy_op)
    return replacement
