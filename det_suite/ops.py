"""Public entry points: static per-tensor FP8 quantization and linear.

Every argument is validated before a kernel launches; bad input raises ValueError or
TypeError naming the argument and what was expected. Nothing is silently converted.

NaN/Inf in `x`: quantization is x / input_scale clamped to +-448. +-Inf saturates to
+-448 (then scaled like any other value); NaN stays NaN through the clamp and the FP8
cast, so a NaN anywhere in row i makes every output of row i NaN and touches no other row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from det_suite.arch import device_family, interpreter_active
from det_suite.kernels.fp8_constants import FP8_E4M3_MAX
from det_suite.kernels.fp8_quantize import fp8_quantize_kernel
from det_suite.kernels.fp8_scaled_mm import fp8_scaled_mm_kernel
from det_suite.kernels.fp8_scaled_mm_swap_ab import fp8_scaled_mm_swap_ab_kernel
from det_suite.kernels.fp8_scaled_mm_tma import fp8_scaled_mm_tma_kernel
from det_suite.kernels.fp8_splitk_reduce import fp8_splitk_reduce_kernel
from det_suite.policy import (SWAP_FALLBACK_BLOCK_M, LaunchConfig, TilePolicy, shipped_policy,
                              validate_stages)

ACTIVATION_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPE = torch.float8_e4m3fn
WeightLayout = Literal["auto", "nk", "kn"]

_QUANT_BLOCK_M = 16
_QUANT_BLOCK_K = 128
_REDUCE_BLOCK_M = 16
_REDUCE_BLOCK_N = 128
# Both GEMM kernels share one epilogue; without FMA contraction it rounds identically in
# each (scale, then bias, two fp32 roundings).
_KERNEL_OPTIONS = {"enable_fp_fusion": False}


# ---------------------------------------------------------------- validation helpers

def _require_tensor(value, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _require_dtype(t: torch.Tensor, name: str, allowed: tuple[torch.dtype, ...]) -> None:
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"{name} must have dtype {names}; got {str(t.dtype).replace('torch.', '')}")


def _require_same_device(tensors: dict[str, torch.Tensor | None]) -> torch.device:
    present = {k: v for k, v in tensors.items() if v is not None}
    devices = {k: v.device for k, v in present.items()}
    first_name, first = next(iter(devices.items()))
    for name, dev in devices.items():
        if dev != first:
            raise ValueError(f"{name} is on {dev} but {first_name} is on {first}; "
                             "all tensors must be on one device")
    if first.type != "cuda" and not interpreter_active() and first.type != "meta":
        raise ValueError(f"{first_name} is on {first}; det-suite's kernels run on a CUDA "
                         "device, or on the CPU only under TRITON_INTERPRET=1")
    return first


_CHECKED_VERSION_ATTR = "_det_suite_checked_version"


def validate_scale(scale, name: str) -> torch.Tensor:
    """A static per-tensor scale: float32, one element (0-d or shape (1,)), finite, > 0.

    Reading the value needs a device sync, so the check runs once per tensor version and is
    remembered on the tensor: static scales are parameters, and a sync per call would stall
    the launch queue (and is illegal inside CUDA Graph capture). Writing to the scale bumps
    its version and re-arms the check.
    """
    scale = _require_tensor(scale, name)
    _require_dtype(scale, name, (torch.float32,))
    if scale.numel() != 1 or scale.dim() > 1:
        raise ValueError(f"{name} must hold exactly one element (shape () or (1,)) for a "
                         f"per-tensor scale; got shape {tuple(scale.shape)}")
    if getattr(scale, _CHECKED_VERSION_ATTR, None) != scale._version:
        if scale.is_cuda and torch.cuda.is_current_stream_capturing():
            raise ValueError(f"{name} was not validated before CUDA Graph capture; run the op "
                             "once eagerly (warm-up) before capturing")
        value = float(scale.reshape(()).item())
        if not math.isfinite(value) or value <= 0.0:
            raise ValueError(f"{name} must be finite and positive; got {value}")
        setattr(scale, _CHECKED_VERSION_ATTR, scale._version)
    return scale.reshape(1)


def resolve_weight(weight, k: int, layout: WeightLayout = "auto") -> torch.Tensor:
    """Return the weight as a (K, N) view whatever its layout.

    "nk": an [N, K] tensor (F.linear's layout). "kn": a (K, N) tensor, e.g. SGLang's
    column-major view `w.t()` of an [N, K] tensor. "auto": K is the dimension with stride 1,
    because FP8 GEMM weights are stored K-contiguous in both conventions; matching by size
    alone would silently transpose a weight whose N happens to equal x's K.
    """
    weight = _require_tensor(weight, "weight")
    _require_dtype(weight, "weight", (FP8_DTYPE,))
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D ([N, K] or (K, N)); got shape {tuple(weight.shape)}")
    if layout not in ("auto", "nk", "kn"):
        raise ValueError(f"weight_layout must be 'auto', 'nk' or 'kn'; got {layout!r}")
    if layout == "auto":
        if weight.stride(1) == 1:
            layout = "nk"
        elif weight.stride(0) == 1:
            layout = "kn"
        else:
            raise ValueError(f"weight with strides {weight.stride()} has no unit-stride dimension "
                             "to take as K; pass weight_layout='nk' or 'kn' to say which "
                             "dimension is K")
    kn = weight.t() if layout == "nk" else weight
    if kn.shape[0] != k:
        raise ValueError(f"weight K dimension is {kn.shape[0]} (layout {layout!r}) but x's last "
                         f"dimension is K={k}")
    return kn


# ---------------------------------------------------------------- launches

def _policy_for(device: torch.device, policy: TilePolicy | None) -> TilePolicy:
    return policy if policy is not None else shipped_policy(device_family(device))


def quantize_fp8(x: torch.Tensor, input_scale: torch.Tensor) -> torch.Tensor:
    """Static per-tensor quantization of a 2-D (M, K) activation to float8_e4m3fn."""
    x = _require_tensor(x, "x")
    _require_dtype(x, "x", ACTIVATION_DTYPES + (torch.float32,))
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (M, K) for quantize_fp8; got shape {tuple(x.shape)}")
    scale = validate_scale(input_scale, "input_scale")
    _require_same_device({"x": x, "input_scale": scale})
    return _launch_quantize(x, scale)


def _launch_quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    q = torch.empty((m, k), dtype=FP8_DTYPE, device=x.device)
    if m == 0 or k == 0:
        return q
    grid = (triton_cdiv(m, _QUANT_BLOCK_M), triton_cdiv(k, _QUANT_BLOCK_K))
    fp8_quantize_kernel[grid](
        x, q, scale, m, k, x.stride(0), x.stride(1), q.stride(0), q.stride(1),
        FP8_MAX=FP8_E4M3_MAX, BLOCK_M=_QUANT_BLOCK_M, BLOCK_K=_QUANT_BLOCK_K,
    )
    return q


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


_TMA_ALIGN_BYTES = 16
_counter_buffers: dict[str, torch.Tensor] = {}
_retired_counter_buffers: list[torch.Tensor] = []
# Enough for any workspace tile grid the shipped tables launch (M <= 256 on N <= 34816 at
# 64x64 tiles is ~2k tiles), so the buffer is sized once at the first split-K launch.
_MIN_COUNTERS = 1 << 16


def _split_k_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Per-tile arrival counters for the fused split-K fix-up, one zeroed buffer per device.

    Kernels leave every counter at zero when they finish, so the buffer serves every launch
    and every CUDA Graph replay. It is keyed by device, not stream: a graph is captured on
    its own stream after an eager warm-up on another, and must find the warm-up's buffer.
    The cost is that two split-K GEMMs must not run concurrently on different streams of one
    device (engines run linears on one stream). A buffer is never freed when it grows,
    because a captured graph keeps its raw pointer.
    """
    buf = _counter_buffers.get(str(device))
    if buf is None or buf.numel() < tiles:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("split-K counters must be allocated before CUDA Graph capture; "
                               "run the op once eagerly at the captured shape first")
        if buf is not None:
            _retired_counter_buffers.append(buf)
        buf = torch.zeros(max(tiles, _MIN_COUNTERS), dtype=torch.int32, device=device)
        _counter_buffers[str(device)] = buf
    return buf


def tma_compatible(a: torch.Tensor, b_kn: torch.Tensor) -> bool:
    """TMA needs K-contiguous operands with 16-byte aligned rows and bases. For det-suite's
    own quantized activations and [N, K] weights this depends on K alone (K % 16 == 0)."""
    def aligned(t, row_stride):
        return t.data_ptr() % _TMA_ALIGN_BYTES == 0 and row_stride % _TMA_ALIGN_BYTES == 0
    return (a.stride(1) == 1 and b_kn.stride(0) == 1
            and aligned(a, a.stride(0)) and aligned(b_kn, b_kn.stride(1)))


# ---------------------------------------------------------------- how the GEMM is launched
#
# `gemm_launch_spec` is the one description of the FP8 GEMM's launches: which kernels, in
# which order, their grids, runtime arguments (in parameter order), constexprs and compile
# options, for a launch config and a problem shape. `launch_fp8_gemm` binds it to tensors
# and launches it; `det_suite.policy_lint` binds it to stand-in tensors and cross-compiles
# it. A launch changed here changes both, so the lint cannot drift from what runs.

# Where each kernel `gemm_launch_spec` names is defined (the lint compiles it from there).
GEMM_LAUNCH_KERNELS = {
    "fp8_scaled_mm_kernel": "det_suite.kernels.fp8_scaled_mm",
    "fp8_scaled_mm_tma_kernel": "det_suite.kernels.fp8_scaled_mm_tma",
    "fp8_scaled_mm_swap_ab_kernel": "det_suite.kernels.fp8_scaled_mm_swap_ab",
    "fp8_splitk_reduce_kernel": "det_suite.kernels.fp8_splitk_reduce",
}
# Each kernel as this module's global at launch time, not bound once: tools and tests
# stand in for a kernel by patching this module's attribute (e.g. det_suite.tune's
# parallel precompile).
_LAUNCH_KERNEL = {
    "fp8_scaled_mm_kernel": lambda: fp8_scaled_mm_kernel,
    "fp8_scaled_mm_tma_kernel": lambda: fp8_scaled_mm_tma_kernel,
    "fp8_scaled_mm_swap_ab_kernel": lambda: fp8_scaled_mm_swap_ab_kernel,
    "fp8_splitk_reduce_kernel": lambda: fp8_splitk_reduce_kernel,
}


@dataclass(frozen=True)
class LaunchArg:
    """What a launch passes for one runtime (non-constexpr) kernel parameter, in terms of
    the launch's tensors by role: a, b_kn, b_nk (= b_kn.t()), out, partials, counters,
    bias, a_scale, b_scale.

    kind "tensor": the tensor itself; "stride": its stride along `dim`; "desc": a TMA
    TensorDescriptor over it (its shape, row stride, unit inner stride, `block_shape`);
    "int": the literal `value`."""

    kind: str
    role: str | None = None
    dim: int | None = None
    value: int | None = None
    block_shape: tuple[int, ...] | None = None

    def bind(self, tensors):
        if self.kind == "int":
            return self.value
        tensor = tensors[self.role]
        if self.kind == "tensor":
            return tensor
        if self.kind == "stride":
            return tensor.stride(self.dim)
        if self.kind == "desc":
            return TensorDescriptor(tensor, list(tensor.shape), [tensor.stride(0), 1],
                                    list(self.block_shape))
        raise AssertionError(f"unknown launch argument kind {self.kind!r}")


def _tensor(role: str) -> LaunchArg:
    return LaunchArg("tensor", role=role)


def _stride(role: str, dim: int) -> LaunchArg:
    return LaunchArg("stride", role=role, dim=dim)


def _desc(role: str, block_shape: tuple[int, ...]) -> LaunchArg:
    return LaunchArg("desc", role=role, block_shape=block_shape)


def _int(value: int) -> LaunchArg:
    return LaunchArg("int", value=value)


@dataclass(frozen=True)
class KernelCall:
    """One kernel launch: `kernel` (named as in GEMM_LAUNCH_KERNELS) on
    `grid`, runtime arguments as (parameter, LaunchArg) in the kernel's parameter order,
    then constexprs and compile options as keyword arguments."""

    kernel: str
    grid: tuple[int, ...]
    args: tuple[tuple[str, LaunchArg], ...]
    constexprs: tuple[tuple[str, object], ...]
    options: tuple[tuple[str, object], ...]

    @property
    def module(self) -> str:
        return GEMM_LAUNCH_KERNELS[self.kernel]

    def bind(self, tensors) -> list:
        return [arg.bind(tensors) for _name, arg in self.args]

    def keywords(self) -> dict:
        return {**dict(self.constexprs), **dict(self.options)}


@dataclass(frozen=True)
class GemmLaunchSpec:
    """Every launch of one FP8 GEMM, in order, and the scratch tensors they need:
    `workspace_shape` (fp32 split-K partials, role "partials") and `counter_tiles`
    (per-tile arrival counters for the fused fix-up, role "counters"; 0: none)."""

    calls: tuple[KernelCall, ...]
    workspace_shape: tuple[int, ...] | None
    counter_tiles: int


_SPEC_CACHE: dict[tuple, GemmLaunchSpec] = {}
_SPEC_CACHE_SIZE = 4096


def gemm_launch_spec(config: LaunchConfig, m: int, n: int, k: int, *, has_bias: bool,
                     use_tma: bool) -> GemmLaunchSpec:
    """How `launch_fp8_gemm` launches an (m x k) @ (k x n) GEMM under `config`. `use_tma`:
    the TMA kernel was chosen (`config.use_tma` and `tma_compatible` operands); otherwise
    the pointer kernel runs, whatever `config.use_tma` says. Memoised: it is on every
    launch's path, and a model calls few distinct shapes."""
    key = (config, m, n, k, has_bias, use_tma)
    spec = _SPEC_CACHE.get(key)
    if spec is None:
        if len(_SPEC_CACHE) >= _SPEC_CACHE_SIZE:
            _SPEC_CACHE.clear()
        spec = _SPEC_CACHE[key] = _build_gemm_launch_spec(config, m, n, k, has_bias, use_tma)
    return spec


def _build_gemm_launch_spec(config: LaunchConfig, m: int, n: int, k: int, has_bias: bool,
                            use_tma: bool) -> GemmLaunchSpec:
    if config.swap_ab and not use_tma:
        config = replace(config, swap_ab=False, block_m=SWAP_FALLBACK_BLOCK_M)
    tiles = triton_cdiv(m, config.block_m) * triton_cdiv(n, config.block_n)
    workspace = config.use_workspace
    fused_fixup = workspace and config.fused_fixup
    partials = "partials" if workspace else "out"  # never written when WRITE_PARTIALS is False
    bias = "bias" if has_bias else "a_scale"        # never read when HAS_BIAS is False
    counters = "counters" if fused_fixup else "a_scale"  # never touched without the fix-up
    tail = (("out_ptr", _tensor("out")), ("partials_ptr", _tensor(partials)),
            ("counters_ptr", _tensor(counters)), ("bias_ptr", _tensor(bias)),
            ("a_scale_ptr", _tensor("a_scale")), ("b_scale_ptr", _tensor("b_scale")),
            ("M", _int(m)), ("N", _int(n)), ("K", _int(k)),
            ("K_CHUNK", _int(config.k_chunk(k))))
    strides = (("stride_ps", _stride(partials, 0) if workspace else _int(0)),
               ("stride_pm", _stride(partials, -2)), ("stride_pn", _stride(partials, -1)),
               ("stride_om", _stride("out", 0)), ("stride_on", _stride("out", 1)))
    common = (("HAS_BIAS", has_bias), ("SPLIT_K", config.split_k),
              ("WRITE_PARTIALS", workspace), ("FUSED_FIXUP", fused_fixup),
              ("BLOCK_M", config.block_m), ("BLOCK_N", config.block_n),
              ("BLOCK_K", config.block_k), ("GROUP_M", config.group_m),
              ("USE_PDL", config.use_pdl))
    options = (("num_warps", config.num_warps), ("num_stages", config.num_stages),
               ("launch_pdl", config.use_pdl), *_KERNEL_OPTIONS.items())
    grid = (tiles, config.split_k if workspace else 1)
    if use_tma:
        gemm = KernelCall(
            "fp8_scaled_mm_swap_ab_kernel" if config.swap_ab else "fp8_scaled_mm_tma_kernel",
            grid,
            (("a_desc", _desc("a", (config.block_m, config.block_k))),
             ("b_desc", _desc("b_nk", (config.block_n, config.block_k))), *tail, *strides),
            common, options)
    else:
        gemm = KernelCall(
            "fp8_scaled_mm_kernel", grid,
            (("a_ptr", _tensor("a")), ("b_ptr", _tensor("b_kn")), *tail,
             ("stride_am", _stride("a", 0)), ("stride_ak", _stride("a", 1)),
             ("stride_bk", _stride("b_kn", 0)), ("stride_bn", _stride("b_kn", 1)), *strides),
            (("EVEN_K", k % config.block_k == 0), *common), options)
    calls = [gemm]
    if workspace and not fused_fixup:
        calls.append(KernelCall(
            "fp8_splitk_reduce_kernel",
            (triton_cdiv(m, _REDUCE_BLOCK_M), triton_cdiv(n, _REDUCE_BLOCK_N)),
            (("partials_ptr", _tensor("partials")), ("out_ptr", _tensor("out")),
             ("bias_ptr", _tensor(bias)), ("a_scale_ptr", _tensor("a_scale")),
             ("b_scale_ptr", _tensor("b_scale")), ("M", _int(m)), ("N", _int(n)), *strides),
            (("HAS_BIAS", has_bias), ("SPLIT_K", config.split_k),
             ("BLOCK_M", _REDUCE_BLOCK_M), ("BLOCK_N", _REDUCE_BLOCK_N)),
            tuple(_KERNEL_OPTIONS.items())))
    return GemmLaunchSpec(calls=tuple(calls),
                          workspace_shape=(config.split_k, m, n) if workspace else None,
                          counter_tiles=tiles if fused_fixup else 0)


def selects_tma(config: LaunchConfig, a, b_kn) -> bool:
    """Whether `launch_fp8_gemm` runs the TMA kernel: the tile asks for it and the operands
    allow it; otherwise the pointer kernel runs the same tile."""
    return config.use_tma and tma_compatible(a, b_kn)


def launch_fp8_gemm(a: torch.Tensor, b_kn: torch.Tensor, a_scale: torch.Tensor,
                    b_scale: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                    config: LaunchConfig) -> torch.Tensor:
    """Launch the GEMM for already-validated operands: a (M, K) fp8, b_kn (K, N) fp8."""
    m, k = a.shape
    n = b_kn.shape[1]
    if config.use_pdl and a.device.type != "cuda":
        # The interpreter runs programs one after another and has no grid-dependency
        # instructions; PDL only moves a GPU launch, so it is dropped there.
        config = replace(config, use_pdl=False)
    spec = gemm_launch_spec(config, m, n, k, has_bias=bias is not None,
                            use_tma=selects_tma(config, a, b_kn))
    tensors = dict(a=a, b_kn=b_kn, b_nk=b_kn.t(), out=out, bias=bias, a_scale=a_scale,
                   b_scale=b_scale)
    if spec.workspace_shape is not None:
        tensors["partials"] = torch.empty(spec.workspace_shape, dtype=torch.float32,
                                          device=a.device)
    if spec.counter_tiles:
        tensors["counters"] = _split_k_counters(a.device, spec.counter_tiles)
    for call in spec.calls:
        _LAUNCH_KERNEL[call.kernel]()[call.grid](*call.bind(tensors), **call.keywords())
    return out


@dataclass(frozen=True)
class _GemmPlan:
    """Validated operands of one GEMM and the launch config chosen for them."""

    b_kn: torch.Tensor
    weight_scale: torch.Tensor
    bias: torch.Tensor | None
    config: LaunchConfig | None  # None when M == 0 (nothing to launch)
    n: int


def _plan_gemm(m: int, k: int, device_tensors: dict, weight, weight_scale, bias, *,
               weight_layout: WeightLayout, num_stages: int | None, policy: TilePolicy | None,
               config: LaunchConfig | None) -> _GemmPlan:
    """Every check on the weight side of a GEMM, done before anything launches."""
    if k == 0:
        raise ValueError("K must be >= 1: x's last dimension is 0")
    b_kn = resolve_weight(weight, k, weight_layout)
    n = b_kn.shape[1]
    weight_scale = validate_scale(weight_scale, "weight_scale")
    if bias is not None:
        bias = _require_tensor(bias, "bias")
        _require_dtype(bias, "bias", ACTIVATION_DTYPES + (torch.float32,))
        if bias.dim() != 1 or bias.shape[0] != n:
            raise ValueError(f"bias must have shape ({n},) to match the weight's N; got "
                             f"{tuple(bias.shape)}")
    if num_stages is not None:
        validate_stages(num_stages)
    device = _require_same_device({**device_tensors, "weight": weight,
                                   "weight_scale": weight_scale, "bias": bias})
    if m > 0 and config is None:
        config = _policy_for(device, policy).select(m, n, k, num_stages=num_stages)
    return _GemmPlan(b_kn=b_kn, weight_scale=weight_scale, bias=bias,
                     config=config if m > 0 else None, n=n)


def fp8_scaled_mm(a: torch.Tensor, weight: torch.Tensor, a_scale: torch.Tensor,
                  weight_scale: torch.Tensor, bias: torch.Tensor | None = None, *,
                  out_dtype: torch.dtype = torch.bfloat16, weight_layout: WeightLayout = "auto",
                  num_stages: int | None = None, policy: TilePolicy | None = None,
                  config: LaunchConfig | None = None) -> torch.Tensor:
    """(M, K) float8_e4m3fn activations times an FP8 weight, scaled, plus bias.

    The counterpart of `torch._scaled_mm` with per-tensor scales: use it to compare GEMMs on
    identical quantized inputs. `config` pins a launch config (tuning and tests); otherwise
    the policy for a's device picks one by (N, K) and M.
    """
    a = _require_tensor(a, "a")
    _require_dtype(a, "a", (FP8_DTYPE,))
    if a.dim() != 2:
        raise ValueError(f"a must be 2-D (M, K); got shape {tuple(a.shape)}")
    if out_dtype not in ACTIVATION_DTYPES:
        raise TypeError(f"out_dtype must be bfloat16 or float16; got {out_dtype}")
    m, k = a.shape
    a_scale = validate_scale(a_scale, "a_scale")
    plan = _plan_gemm(m, k, {"a": a, "a_scale": a_scale}, weight, weight_scale, bias,
                      weight_layout=weight_layout, num_stages=num_stages, policy=policy,
                      config=config)
    out = torch.empty((m, plan.n), dtype=out_dtype, device=a.device)
    if plan.config is None:
        return out
    return launch_fp8_gemm(a, plan.b_kn, a_scale, plan.weight_scale, plan.bias, out, plan.config)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
               input_scale: torch.Tensor, bias: torch.Tensor | None = None, *,
               weight_layout: WeightLayout = "auto", num_stages: int | None = None,
               policy: TilePolicy | None = None) -> torch.Tensor:
    """Batch-invariant static per-tensor FP8 linear: y = (q(x) @ W^T) * s_x * s_w + bias.

    x: BF16/FP16, shape (..., K), any strides. weight: float8_e4m3fn [N, K] or its (K, N)
    column-major view (see `resolve_weight`). Scales: float32, one element, finite, > 0.
    bias: optional (N,). Returns x.dtype, shape (..., N). Row i of the output depends on row
    i of x only, with a reduction schedule fixed by (N, K): bit-identical for any M.
    """
    x = _require_tensor(x, "x")
    _require_dtype(x, "x", ACTIVATION_DTYPES)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (..., K)")
    k = x.shape[-1]
    lead = x.shape[:-1]
    m = math.prod(lead)
    input_scale = validate_scale(input_scale, "input_scale")
    plan = _plan_gemm(m, k, {"x": x, "input_scale": input_scale}, weight, weight_scale, bias,
                      weight_layout=weight_layout, num_stages=num_stages, policy=policy,
                      config=None)
    out = torch.empty((m, plan.n), dtype=x.dtype, device=x.device)
    if plan.config is not None:
        q = _launch_quantize(x.reshape(m, k), input_scale)  # reshape: a view where strides allow
        launch_fp8_gemm(q, plan.b_kn, input_scale, plan.weight_scale, plan.bias, out,
                        plan.config)
    return out.reshape(*lead, plan.n)
