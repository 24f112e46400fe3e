"""Stand-in tensors, and launch descriptions (`det_suite.ops.launch_spec`) bound to them.

The lint never allocates: what argument specialisation and `ops.tma_compatible` look at in
a tensor (dtype, shape, strides, address) is all a stand-in holds. The tensors are those
`ops.launch_fp8_gemm` and `ops.launch_quantize` pass, by role: activations contiguous,
weight an [N, K] tensor seen as its (K, N) view (SGLang's `w.t()` is the same view),
output bf16, no bias. Bias is added in the epilogue after the K reduction and cannot change
the dot's lowering; the output dtype only changes the final cast. (An N-contiguous weight
was checked by hand on sm_89/90/100/120 and gives the same MMA.)

torch is imported only where a dtype is needed, so a compile worker never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from det_suite.ops import GemmLaunchSpec, KernelCall

# Bytes a stand-in activation's base is moved off 16-byte alignment for a pointer fallback.
MISALIGNED_BASE_OFFSET = 8
# ops keeps one buffer of at least this many split-K arrival counters.
MIN_COUNTERS = 1024


@dataclass(frozen=True)
class StandInTensor:
    """What argument specialisation and `ops.tma_compatible` look at in a tensor: dtype,
    shape, strides and an address (16-byte aligned unless told otherwise)."""

    dtype: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    address: int = 1 << 20

    def data_ptr(self) -> int:
        return self.address

    def stride(self, dim: int | None = None):
        return self.strides if dim is None else self.strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    def t(self) -> "StandInTensor":
        return replace(self, shape=self.shape[::-1], strides=self.strides[::-1])


def contiguous(dtype, *shape: int) -> StandInTensor:
    """A row-major stand-in of `shape`."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return StandInTensor(dtype, tuple(shape), tuple(reversed(strides)))


def gemm_operands(m: int, n: int, k: int, *, aligned: bool = True
                  ) -> tuple[StandInTensor, StandInTensor]:
    """a (M, K) contiguous and b_kn, the (K, N) view of an [N, K] weight (fp8_linear's).
    aligned=False moves a's base off 16-byte alignment (e.g. an offset view passed to
    `fp8_scaled_mm`): operands TMA cannot take, whatever K is."""
    import torch

    fp8 = torch.float8_e4m3fn
    a = contiguous(fp8, m, k)
    if not aligned:
        a = replace(a, address=a.address + MISALIGNED_BASE_OFFSET)
    return a, contiguous(fp8, n, k).t()


def gemm_tensors(spec: "GemmLaunchSpec", a: StandInTensor, b_kn: StandInTensor
                 ) -> dict[str, StandInTensor]:
    """Stand-ins for every tensor role a `GemmLaunchSpec` may name (ops.launch_fp8_gemm's
    tensors): the operands, bf16 output, fp32 scales, fp32 partials, int32 counters; no
    bias."""
    import torch

    m, n = a.shape[0], b_kn.shape[1]
    scale = contiguous(torch.float32, 1)
    tensors = dict(a=a, b_kn=b_kn, b_nk=b_kn.t(), out=contiguous(torch.bfloat16, m, n),
                   a_scale=scale, b_scale=scale)
    if spec.workspace_shape is not None:
        tensors["partials"] = contiguous(torch.float32, *spec.workspace_shape)
    if spec.counter_tiles:
        tensors["counters"] = contiguous(torch.int32, max(spec.counter_tiles, MIN_COUNTERS))
    return tensors


def quantize_tensors(m: int, k: int) -> dict[str, StandInTensor]:
    """Stand-ins for `ops.quantize_launch_spec`'s roles (ops.launch_quantize's tensors): a
    bf16 activation x, its fp8 quantization q, one fp32 scale."""
    import torch

    return dict(x=contiguous(torch.bfloat16, m, k), q=contiguous(torch.float8_e4m3fn, m, k),
                scale=contiguous(torch.float32, 1))


@dataclass
class KernelLaunch:
    """A kernel launch as the op performs it: runtime args in positional order (stand-ins
    for tensors, by parameter name), tl.constexpr args, and compile options."""

    args: dict[str, Any]
    constexprs: dict[str, Any]
    options: dict[str, Any]


def bind_call(call: "KernelCall", tensors) -> KernelLaunch:
    """A `KernelCall` of `ops.launch_spec` bound to (stand-in) tensors."""
    values = call.bind(tensors)
    return KernelLaunch(dict(zip((name for name, _arg in call.args), values)),
                        dict(call.constexprs), dict(call.options))
