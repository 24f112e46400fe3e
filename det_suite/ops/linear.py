"""The public ops: static per-tensor FP8 quantization, scaled-MM and linear.

Every argument is validated (`ops.validation`) before a kernel launches; the launch config
comes from the tile policy of the operands' device unless one is pinned.

NaN/Inf in `x`: quantization is x / input_scale clamped to +-448. +-Inf saturates to
+-448 (then scaled like any other value); NaN stays NaN through the clamp and the FP8
cast, so a NaN anywhere in row i makes every output of row i NaN and touches no other row.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from det_suite.ops.launch import launch_fp8_gemm, launch_quantize, sm_count
from det_suite.ops.launch_spec import MAX_SEGMENTS
from det_suite.ops.validation import (ACTIVATION_DTYPES, FP8_DTYPE, WeightLayout, require_dtype,
                                      require_same_device, require_tensor, resolve_weight,
                                      validate_scale, validate_scale_vector)
from det_suite.platform.family import device_family
from det_suite.policy import LaunchConfig, TilePolicy, shipped_policy, validate_stages


def _policy_for(device: torch.device, policy: TilePolicy | None) -> TilePolicy:
    return policy if policy is not None else device_policy(device)


def device_policy(device: torch.device, table: TilePolicy | None = None) -> TilePolicy:
    """`table` (default: the shipped table of `device`'s family) serving `device`: shapes
    no entry names get the family's generic rule for the device's SM count (a pinned table,
    e.g. `bench gemm --policy`, is served here too, so both size split-K alike)."""
    index = device.index
    if device.type == "cuda" and index is None:
        index = torch.cuda.current_device()
    if table is None:
        return _device_policy(device.type, index)
    return table.on_device(_sm_count(device.type, index))


def _sm_count(device_type: str, index: int | None) -> int | None:
    return sm_count(index) if device_type == "cuda" else None


@lru_cache(maxsize=None)
def _device_policy(device_type: str, index: int | None) -> TilePolicy:
    device = torch.device(device_type, index) if index is not None else torch.device(device_type)
    return shipped_policy(device_family(device)).on_device(_sm_count(device_type, index))


def quantize_fp8(x: torch.Tensor, input_scale: torch.Tensor) -> torch.Tensor:
    """Static per-tensor quantization of a 2-D (M, K) activation to float8_e4m3fn."""
    x = require_tensor(x, "x")
    require_dtype(x, "x", ACTIVATION_DTYPES + (torch.float32,))
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (M, K) for quantize_fp8; got shape {tuple(x.shape)}")
    scale = validate_scale(input_scale, "input_scale")
    require_same_device({"x": x, "input_scale": scale})
    return launch_quantize(x, scale)


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
               config: LaunchConfig | None, check_scale=validate_scale) -> _GemmPlan:
    """Every check on the weight side of a GEMM, done before anything launches."""
    if k == 0:
        raise ValueError("K must be >= 1: x's last dimension is 0")
    b_kn = resolve_weight(weight, k, weight_layout)
    n = b_kn.shape[1]
    weight_scale = check_scale(weight_scale, "weight_scale")
    if bias is not None:
        bias = require_tensor(bias, "bias")
        require_dtype(bias, "bias", ACTIVATION_DTYPES + (torch.float32,))
        if bias.dim() != 1 or bias.shape[0] != n:
            raise ValueError(f"bias must have shape ({n},) to match the weight's N; got "
                             f"{tuple(bias.shape)}")
    if num_stages is not None:
        validate_stages(num_stages)
    device = require_same_device({**device_tensors, "weight": weight,
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
    a = require_tensor(a, "a")
    require_dtype(a, "a", (FP8_DTYPE,))
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


def fp8_scaled_mm_segmented(a: torch.Tensor, weight: torch.Tensor, a_scales: torch.Tensor,
                            weight_scales: torch.Tensor, segments: tuple[int, ...],
                            bias: torch.Tensor | None = None, *,
                            out_dtype: torch.dtype = torch.bfloat16,
                            num_stages: int | None = None, policy: TilePolicy | None = None,
                            config: LaunchConfig | None = None) -> torch.Tensor:
    """Several FP8 GEMMs over one K as one launch: columns are cut into segments of
    `segments` widths (2 or 3, summing to N), and segment s is
    `fp8_scaled_mm(a[s], weight[its rows], a_scales[s], weight_scales[s], bias[its columns])`.

    a (S, M, K) float8_e4m3fn, rows contiguous across segments (one buffer, as
    `rms_norm_quantized_stacked` writes it); weight [N, K] (the segments' weights stacked
    in one buffer); a_scales, weight_scales float32 (S,). Returns (M, N) `out_dtype`.

    A decoder layer's q/k/v (or gate/up) read one input quantized with a scale each: one
    launch fills the GPU where three narrow ones do not. Same bits as separate GEMMs run
    with this shape's reduction schedule: the schedule is chosen for the stacked (N, K),
    like any GEMM's, and never depends on M. Every segment width must be a multiple of
    each tile's BLOCK_N the policy may choose for (N, K) (`segments_fit`), so a tile reads
    one segment's activation.
    """
    a = require_tensor(a, "a")
    require_dtype(a, "a", (FP8_DTYPE,))
    segments = tuple(segments)
    if not 2 <= len(segments) <= MAX_SEGMENTS or any(
            not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in segments):
        raise ValueError(f"segments must be 2 to {MAX_SEGMENTS} positive int widths; got "
                         f"{segments}")
    if a.dim() != 3 or a.shape[0] != len(segments):
        raise ValueError(f"a must be ({len(segments)}, M, K), one activation per segment; got "
                         f"shape {tuple(a.shape)}")
    if out_dtype not in ACTIVATION_DTYPES:
        raise TypeError(f"out_dtype must be bfloat16 or float16; got {out_dtype}")
    s, m, k = a.shape
    if m > 1 and a.stride(1) != k * a.stride(2) or m and a.stride(0) != m * a.stride(1):
        raise ValueError(f"a's segments must be one buffer of stacked rows (strides "
                         f"(M * K, K, 1)); got strides {a.stride()}")
    a_scales = validate_scale_vector(a_scales, "a_scales", s)
    plan = _plan_gemm(m, k, {"a": a, "a_scales": a_scales}, weight, weight_scales, bias,
                      weight_layout="nk", num_stages=num_stages, policy=policy, config=config,
                      check_scale=lambda t, _: validate_scale_vector(t, "weight_scales", s))
    if sum(segments) != plan.n:
        raise ValueError(f"segments {segments} must sum to the weight's N = {plan.n}")
    ends = tuple(itertools.accumulate(segments))[:-1]
    out = torch.empty((m, plan.n), dtype=out_dtype, device=a.device)
    if plan.config is None:
        return out
    if any(end % plan.config.block_n for end in ends):
        raise ValueError(f"segments {segments}: every segment must end on a multiple of the "
                         f"tile's BLOCK_N {plan.config.block_n} (see segments_fit)")
    return launch_fp8_gemm(a.reshape(s * m, k), plan.b_kn, a_scales, plan.weight_scale,
                           plan.bias, out, plan.config, segment_ends=ends)


def segments_fit(segments: tuple[int, ...], k: int, device: torch.device,
                 policy: TilePolicy | None = None) -> bool:
    """Whether `fp8_scaled_mm_segmented` can run these segment widths at every M on
    `device`: each segment ends on a multiple of every tile's BLOCK_N the policy serves
    the stacked (N, K) with."""
    if not 2 <= len(segments) <= MAX_SEGMENTS:
        return False
    widths = {c.block_n for c in _policy_for(device, policy).entry(sum(segments), k).variants()}
    ends = tuple(itertools.accumulate(segments))[:-1]
    return all(end % w == 0 for end in ends for w in widths)


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
    x = require_tensor(x, "x")
    require_dtype(x, "x", ACTIVATION_DTYPES)
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
        q = launch_quantize(x.reshape(m, k), input_scale)  # reshape: a view where strides allow
        launch_fp8_gemm(q, plan.b_kn, input_scale, plan.weight_scale, plan.bias, out,
                        plan.config)
    return out.reshape(*lead, plan.n)
