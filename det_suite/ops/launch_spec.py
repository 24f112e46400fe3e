"""How each kernel is launched, as data: which kernels, in which order, their grids,
runtime arguments (in parameter order), constexprs and compile options, for a launch
config and a problem shape.

`ops.launch` binds a description to tensors and launches it; `det_suite.lint` binds the
same description to stand-in tensors and cross-compiles it. A launch changed here changes
both, so the lint cannot drift from what runs. Kernels are named as in
`det_suite.kernels.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from triton.tools.tensor_descriptor import TensorDescriptor

from det_suite.kernels import registry
from det_suite.kernels.fp8_constants import FP8_E4M3_MAX
from det_suite.policy import SWAP_FALLBACK_BLOCK_M, LaunchConfig

QUANT_BLOCK_M = 16
QUANT_BLOCK_K = 128
REDUCE_BLOCK_M = 16
REDUCE_BLOCK_N = 128
# Both GEMM kernels share one epilogue; without FMA contraction it rounds identically in
# each (scale, then bias, two fp32 roundings).
GEMM_KERNEL_OPTIONS = {"enable_fp_fusion": False}
_TMA_ALIGN_BYTES = 16
# A segmented GEMM's column segments (a decoder layer's q, k and v at most).
MAX_SEGMENTS = 3


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tma_compatible(a: torch.Tensor, b_kn: torch.Tensor) -> bool:
    """TMA needs K-contiguous operands with 16-byte aligned rows and bases. For det-suite's
    own quantized activations and [N, K] weights this depends on K alone (K % 16 == 0)."""
    def aligned(t, row_stride):
        return t.data_ptr() % _TMA_ALIGN_BYTES == 0 and row_stride % _TMA_ALIGN_BYTES == 0
    return (a.stride(1) == 1 and b_kn.stride(0) == 1
            and aligned(a, a.stride(0)) and aligned(b_kn, b_kn.stride(1)))


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
        if self.kind == "gluon_desc":  # the warp-specialised kernel's (pingpong_launch_spec)
            from det_suite.ops.pingpong_launch_spec import gluon_descriptor
            return gluon_descriptor(tensor, self.block_shape)
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
    """One kernel launch: `kernel` (named as in `det_suite.kernels.registry`) on
    `grid`, runtime arguments as (parameter, LaunchArg) in the kernel's parameter order,
    then constexprs and compile options as keyword arguments."""

    kernel: str
    grid: tuple[int, ...]
    args: tuple[tuple[str, LaunchArg], ...]
    constexprs: tuple[tuple[str, object], ...]
    options: tuple[tuple[str, object], ...]

    @property
    def module(self) -> str:
        return registry.entry(self.kernel).module

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
                     use_tma: bool, segment_ends: tuple[int, ...] = ()) -> GemmLaunchSpec:
    """How `launch_fp8_gemm` launches an (m x k) @ (k x n) GEMM under `config`. `use_tma`:
    the TMA kernel was chosen (`config.use_tma` and `tma_compatible` operands); otherwise
    the pointer kernel runs, whatever `config.use_tma` says. `segment_ends`: for a
    segmented GEMM, where each column segment but the last ends (ascending multiples of the
    tile's BLOCK_N; the activation `a` is then the segments' (M, K) activations stacked to
    (S * M, K)). Memoised: it is on every launch's path, and a model calls few distinct
    shapes."""
    key = (config, m, n, k, has_bias, use_tma, segment_ends)
    spec = _SPEC_CACHE.get(key)
    if spec is None:
        if len(_SPEC_CACHE) >= _SPEC_CACHE_SIZE:
            _SPEC_CACHE.clear()
        spec = _SPEC_CACHE[key] = _build_gemm_launch_spec(config, m, n, k, has_bias, use_tma,
                                                          segment_ends)
    return spec


def _segment_args(n: int, segment_ends: tuple[int, ...]):
    if len(segment_ends) >= MAX_SEGMENTS:
        raise ValueError(f"segment_ends: at most {MAX_SEGMENTS - 1} ends ({MAX_SEGMENTS} "
                         f"segments); got {segment_ends}")
    ends = (*segment_ends, n, n)
    return ((("SEG_END0", _int(ends[0])), ("SEG_END1", _int(ends[1]))),
            ("SEGMENTS", len(segment_ends) + 1))


def _build_gemm_launch_spec(config: LaunchConfig, m: int, n: int, k: int, has_bias: bool,
                            use_tma: bool, segment_ends: tuple[int, ...] = ()) -> GemmLaunchSpec:
    if config.swap_ab and not use_tma:
        config = replace(config, swap_ab=False, block_m=SWAP_FALLBACK_BLOCK_M)
    seg_ends, segments = _segment_args(n, segment_ends)
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
            ("K_CHUNK", _int(config.k_chunk(k))), *seg_ends)
    strides = (("stride_ps", _stride(partials, 0) if workspace else _int(0)),
               ("stride_pm", _stride(partials, -2)), ("stride_pn", _stride(partials, -1)),
               ("stride_om", _stride("out", 0)), ("stride_on", _stride("out", 1)))
    common = (("HAS_BIAS", has_bias), ("SPLIT_K", config.split_k),
              ("WRITE_PARTIALS", workspace), ("FUSED_FIXUP", fused_fixup),
              ("BLOCK_M", config.block_m), ("BLOCK_N", config.block_n),
              ("BLOCK_K", config.block_k), ("GROUP_M", config.group_m),
              ("USE_PDL", config.use_pdl), ("PROMOTE_K", config.promote_k), segments)
    options = (("num_warps", config.num_warps), ("num_stages", config.num_stages),
               ("launch_pdl", config.use_pdl), *GEMM_KERNEL_OPTIONS.items())
    grid = (tiles, config.split_k if workspace else 1)
    if config.warp_specialized:
        from det_suite.ops import pingpong_launch_spec as pingpong
        if pingpong.applies(config, use_tma, workspace, segments[1]):
            return GemmLaunchSpec(calls=(pingpong.pingpong_call(config, m, n, k, has_bias),),
                                  workspace_shape=None, counter_tiles=0)
    if use_tma:
        gemm = KernelCall(
            "fp8_scaled_mm_tma_kernel", grid,
            (("a_desc", _desc("a", (config.block_m, config.block_k))),
             ("b_desc", _desc("b_nk", (config.block_n, config.block_k))), *tail, *strides,
             ("b_ptr", _tensor("b_nk")), ("stride_bn", _stride("b_nk", 0))),
            (*common, ("SWAP_AB", config.swap_ab), ("PREFETCH_K", config.prefetch_k)), options)
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
            (triton_cdiv(m, REDUCE_BLOCK_M), triton_cdiv(n, REDUCE_BLOCK_N)),
            (("partials_ptr", _tensor("partials")), ("out_ptr", _tensor("out")),
             ("bias_ptr", _tensor(bias)), ("a_scale_ptr", _tensor("a_scale")),
             ("b_scale_ptr", _tensor("b_scale")), ("M", _int(m)), ("N", _int(n)), *seg_ends,
             *strides),
            (("HAS_BIAS", has_bias), ("SPLIT_K", config.split_k), segments,
             ("BLOCK_M", REDUCE_BLOCK_M), ("BLOCK_N", REDUCE_BLOCK_N)),
            tuple(GEMM_KERNEL_OPTIONS.items())))
    return GemmLaunchSpec(calls=tuple(calls),
                          workspace_shape=(config.split_k, m, n) if workspace else None,
                          counter_tiles=tiles if fused_fixup else 0)


def quantize_launch_spec(m: int, k: int) -> KernelCall:
    """The static per-tensor quantization of an (m, k) activation `x` into `q` (fp8),
    scaled by `scale`: one elementwise launch with Triton's default options."""
    return KernelCall(
        "fp8_quantize_kernel", (triton_cdiv(m, QUANT_BLOCK_M), triton_cdiv(k, QUANT_BLOCK_K)),
        (("x_ptr", _tensor("x")), ("q_ptr", _tensor("q")), ("scale_ptr", _tensor("scale")),
         ("M", _int(m)), ("K", _int(k)), ("stride_xm", _stride("x", 0)),
         ("stride_xk", _stride("x", 1)), ("stride_qm", _stride("q", 0)),
         ("stride_qk", _stride("q", 1))),
        (("FP8_MAX", FP8_E4M3_MAX), ("BLOCK_M", QUANT_BLOCK_M), ("BLOCK_K", QUANT_BLOCK_K)),
        ())


def selects_tma(config: LaunchConfig, a, b_kn) -> bool:
    """Whether `launch_fp8_gemm` runs the TMA kernel: the tile asks for it and the operands
    allow it; otherwise the pointer kernel runs the same tile."""
    return config.use_tma and tma_compatible(a, b_kn)
