"""A decoder layer's projections that read one input (q/k/v, gate/up), stacked for one
segmented GEMM (`ops.fp8_scaled_mm_segmented`).

A batch-1 decode step runs each projection as its own GEMM: k and v (N = 1024 on
Qwen3-8B) fill 16 of the H200's 132 SMs and gate and up 1.5 waves each, so the step pays
for narrow launches, not for weight bytes (benchmarks/profile_decode.py). Stacked, q/k/v is one
N = 6144 GEMM and gate/up one N = 24576 GEMM. The checkpoint's scales stay exact: each
member keeps its own weight and input scale (one per column segment), so no weight is
re-rounded to a shared scale, as a merged per-tensor scale would require.

Stacking costs no memory: the members' tensors are replaced by views of the stacked ones
(same values), so the stock control arm, which runs the members one by one, reads the same
buffers. The reduction schedule is the stacked (N, K)'s, chosen like any GEMM's from the
shape alone, so it never depends on the number of tokens.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from det_suite.models.synthetic_linear import Fp8Linear
from det_suite.ops import segments_fit

# The projections of a Qwen3 layer that read one normed input, in column order.
STACKED_PROJECTIONS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
# Groups already made, by id of their first member: a second engine on one checkpoint
# reuses the first's buffers instead of stacking copies of the views.
_STACKED: "weakref.WeakValueDictionary[int, Fp8LinearGroup]" = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class Fp8LinearGroup:
    """Linears over one K, stacked: member s owns columns [sum(widths[:s]), +widths[s])."""

    weight: torch.Tensor          # (N, K) float8_e4m3fn
    weight_scales: torch.Tensor   # (S,) float32
    input_scales: torch.Tensor    # (S,) float32
    bias: torch.Tensor | None     # (N,) or None
    widths: tuple[int, ...]
    members: tuple[Fp8Linear, ...]  # views of the tensors above, in segment order


def _scale_value(scale: torch.Tensor, name: str) -> torch.Tensor:
    if scale.numel() != 1 or scale.dtype != torch.float32:
        raise ValueError(f"{name} must be a one-element float32 scale; got "
                         f"{tuple(scale.shape)} {scale.dtype}")
    return scale.reshape(())


def stack_linears(linears) -> Fp8LinearGroup:
    """One buffer per tensor kind for `linears` (2 or 3 Fp8Linear of one K, device and
    bias presence). The returned members are views into it."""
    linears = tuple(linears)
    if not 2 <= len(linears) <= 3:
        raise ValueError(f"linears: expected 2 or 3 to stack, got {len(linears)}")
    first = linears[0]
    for i, lin in enumerate(linears):
        if lin.weight.dim() != 2 or lin.k != first.k or lin.weight.dtype != first.weight.dtype:
            raise ValueError(f"linears[{i}]: weight {tuple(lin.weight.shape)} "
                             f"{lin.weight.dtype} does not stack with linears[0]'s "
                             f"{tuple(first.weight.shape)} {first.weight.dtype} (one K, one dtype)")
        if lin.weight.device != first.weight.device:
            raise ValueError(f"linears[{i}] is on {lin.weight.device}, linears[0] on "
                             f"{first.weight.device}")
        if (lin.bias is None) != (first.bias is None):
            raise ValueError("linears: either every member has a bias or none has")
    weight = torch.cat([lin.weight for lin in linears]).contiguous()
    weight_scales = torch.stack([_scale_value(lin.weight_scale, f"linears[{i}].weight_scale")
                                 for i, lin in enumerate(linears)])
    input_scales = torch.stack([_scale_value(lin.input_scale, f"linears[{i}].input_scale")
                                for i, lin in enumerate(linears)])
    bias = None if first.bias is None else torch.cat([lin.bias for lin in linears])
    widths = tuple(lin.n for lin in linears)
    members, start = [], 0
    for i, (lin, width) in enumerate(zip(linears, widths)):
        cols = slice(start, start + width)
        # Views keep each scale's shape as the checkpoint gave it.
        members.append(Fp8Linear(weight[cols], weight_scales[i:i + 1].view(lin.weight_scale.shape),
                                 input_scales[i:i + 1].view(lin.input_scale.shape),
                                 None if bias is None else bias[cols]))
        start += width
    return Fp8LinearGroup(weight, weight_scales, input_scales, bias, widths, tuple(members))


def stack_layer_projections(layer) -> tuple[Fp8LinearGroup | None, ...]:
    """Stack each of the layer's STACKED_PROJECTIONS where the segmented GEMM can serve
    it at every M on the layer's device (`ops.segments_fit`); replace the members on
    `layer` with their views. None for a projection set left as separate GEMMs."""
    groups = []
    for names in STACKED_PROJECTIONS:
        linears = [getattr(layer, name) for name in names]
        made = _STACKED.get(id(linears[0]))
        if made is not None and all(a is b for a, b in zip(made.members, linears, strict=True)):
            groups.append(made)
            continue
        widths = tuple(lin.n for lin in linears)
        k, device = linears[0].k, linears[0].weight.device
        if (any(lin.k != k for lin in linears)
                or len({lin.bias is None for lin in linears}) > 1
                or not segments_fit(widths, k, device)):
            groups.append(None)
            continue
        group = stack_linears(linears)
        for name, member in zip(names, group.members):
            setattr(layer, name, member)
        _STACKED[id(group.members[0])] = group
        groups.append(group)
    return tuple(groups)
