"""Batch-invariant ops for the rest of a model's forward: `bf16_linear` (the lm_head),
`rms_norm` (layer norms, q/k norm), `log_softmax` (selected-token logprobs),
`paged_attention` (prefill with a query offset, chunked prefill, decode), `write_kv`, and
`qk_norm_rope_write` (an attention block's q/k norm, RoPE and KV write in one launch).

A row's (a query's) output bits depend on that row's inputs only: never on how many rows
the call holds, on the other requests, or on how a prefill was chunked. Each op launches
one kernel with one tile for every call (`ops.bi_launch_spec`), except paged_attention's
decode calls, which launch two (a partial kernel over the context's segments, then their
combine) with the tile kernel's tile and the same bits. On SM90+ GPUs every op but
paged_attention launches with programmatic dependent launch
(`ops.launch.programmatic_launch`): a kernel starts while the one before it drains and
waits for it before touching memory, the same bits either way. Arguments are checked
before anything launches (ValueError / TypeError naming the argument); nothing is
converted silently. Value checks that need the data on the host (query_starts ordering,
block-table bounds) run on CPU tensors only: on a GPU they would sync every layer and
break CUDA Graph capture, and the engine builds that metadata itself.
"""

from __future__ import annotations

import torch

from det_suite.kernels import registry
from det_suite.ops.bi_launch_spec import (ATTENTION_TILE, attention_launch_spec,
                                          attention_split_launch_spec, attention_splits_kv,
                                          attention_workspace_shapes,
                                          log_softmax_launch_spec, log_softmax_stats_shape,
                                          matmul_launch_spec, qk_norm_rope_launch_spec,
                                          rmsnorm_launch_spec)
from det_suite.ops.launch import Launcher, programmatic_launch, run_kernel
from det_suite.ops.validation import (FP8_DTYPE, require_dtype, require_same_device,
                                      require_tensor, validate_scale)

HALF_DTYPES = (torch.bfloat16, torch.float16)
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INDEX_DTYPE = torch.int32


def _launch(call, tensors: dict, launcher: Launcher) -> None:
    launcher(registry.kernel(call.kernel), call, call.bind(tensors), call.keywords())


def _require_dim(t: torch.Tensor, name: str, ndim: int, what: str) -> None:
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D {what}; got shape {tuple(t.shape)}")


def _require_unit_last_stride(t: torch.Tensor, name: str) -> None:
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous along its last dimension; got strides "
                         f"{t.stride()}")


def _rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """x (..., C) as a 2-D (rows, C) view with unit stride along C (a copy only when the
    leading dimensions cannot be flattened into a view)."""
    if x.dim() < 1:
        raise ValueError(f"{name} must have at least one dimension; got a 0-d tensor")
    _require_unit_last_stride(x, name)
    return x.reshape(-1, x.shape[-1])


# ------------------------------------------------------------------ bf16_linear

def bf16_linear(x, weight, bias=None, *, launcher: Launcher = run_kernel) -> torch.Tensor:
    """y = x @ weight.T (+ bias), x (..., K) bf16/fp16, weight (N, K) of x's dtype, bias (N,)
    of x's dtype or None; y (..., N) in x's dtype. fp32 accumulation over K in one fixed
    order for every M."""
    x = require_tensor(x, "x")
    weight = require_tensor(weight, "weight")
    require_dtype(x, "x", HALF_DTYPES)
    if weight.dtype != x.dtype:
        raise TypeError(f"weight must have x's dtype ({x.dtype}); got {weight.dtype}")
    _require_dim(weight, "weight", 2, "(N, K)")
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x's last dimension must be weight's K={weight.shape[1]}; got x shape "
                         f"{tuple(x.shape)}")
    if bias is not None:
        bias = require_tensor(bias, "bias")
        if bias.dtype != x.dtype or tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(f"bias must be ({weight.shape[0]},) of dtype {x.dtype}; got "
                             f"{tuple(bias.shape)} {bias.dtype}")
    require_same_device({"x": x, "weight": weight, "bias": bias})
    n, k = weight.shape
    rows = x.reshape(-1, k)
    m = rows.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m and n:
        if k == 0:
            out.zero_()
            if bias is not None:
                out += bias
        else:
            call = matmul_launch_spec(m, n, k, has_bias=bias is not None,
                                      pdl=programmatic_launch(x.device))
            _launch(call, dict(x=rows, w=weight, bias=bias, out=out), launcher)
    return out.reshape(*x.shape[:-1], n)


# ------------------------------------------------------------------ rms_norm

def rms_norm(x, weight, eps: float, *, launcher: Launcher = run_kernel) -> torch.Tensor:
    """Qwen3RMSNorm: weight * (x.float() * rsqrt(mean(x.float()**2) + eps)).to(x.dtype),
    x (..., H) bf16/fp16/fp32, weight (H,); result in x's dtype. One row per program."""
    x = require_tensor(x, "x")
    weight = require_tensor(weight, "weight")
    require_dtype(x, "x", FLOAT_DTYPES)
    require_dtype(weight, "weight", FLOAT_DTYPES)
    if x.dim() < 1 or weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must be (H,) with H = x's last dimension; got weight "
                         f"{tuple(weight.shape)} for x {tuple(x.shape)}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0.0:
        raise ValueError(f"eps must be a non-negative float; got {eps!r}")
    require_same_device({"x": x, "weight": weight})
    _require_unit_last_stride(weight, "weight")
    rows = _rows(x, "x")
    m, h = rows.shape
    out = torch.empty((m, h), dtype=x.dtype, device=x.device)
    if m and h:
        _launch(rmsnorm_launch_spec(m, h, float(eps), pdl=programmatic_launch(x.device)),
                dict(x=rows, weight=weight, out=out), launcher)
    return out.reshape(x.shape)


# ------------------------------------------------------------------ log_softmax

def log_softmax(x, *, launcher: Launcher = run_kernel) -> torch.Tensor:
    """log_softmax over the last dimension of x (M, V), any float dtype; fp32 (M, V)."""
    x = require_tensor(x, "x")
    require_dtype(x, "x", FLOAT_DTYPES)
    _require_dim(x, "x", 2, "(M, V)")
    require_same_device({"x": x})
    _require_unit_last_stride(x, "x")
    m, v = x.shape
    out = torch.empty((m, v), dtype=torch.float32, device=x.device)
    if m and v:
        stats = torch.empty(log_softmax_stats_shape(m, v), dtype=torch.float32,
                            device=x.device)
        for call in log_softmax_launch_spec(m, v, pdl=programmatic_launch(x.device)):
            _launch(call, dict(x=x, stats=stats, out=out), launcher)
    return out


# ------------------------------------------------------------------ paged attention

def _check_index(t, name: str, shape_text: str, ndim: int) -> torch.Tensor:
    t = require_tensor(t, name)
    require_dtype(t, name, (INDEX_DTYPE,))
    _require_dim(t, name, ndim, shape_text)
    return t


def _check_attention_values(num_tokens, block_tables, context_lens, query_starts,
                            num_blocks, block_size) -> None:
    starts = query_starts.tolist()
    if starts[0] != 0 or starts[-1] != num_tokens:
        raise ValueError(f"query_starts must run from 0 to q's T={num_tokens}; got "
                         f"{starts[0]} .. {starts[-1]}")
    if any(b < a for a, b in zip(starts, starts[1:])):
        raise ValueError(f"query_starts must be non-decreasing; got {starts}")
    contexts = context_lens.tolist()
    if any(c < 0 for c in contexts):
        raise ValueError(f"context_lens must be >= 0; got {contexts}")
    for r, (ctx, a, b) in enumerate(zip(contexts, starts, starts[1:])):
        needed = -(-(ctx + b - a) // block_size)
        if needed > block_tables.shape[1]:
            raise ValueError(f"request {r} needs {needed} blocks for {ctx + b - a} tokens but "
                             f"block_tables has {block_tables.shape[1]} columns")
        used = block_tables[r, :needed]
        if needed and (int(used.min()) < 0 or int(used.max()) >= num_blocks):
            raise ValueError(f"block_tables[{r}] names blocks outside 0..{num_blocks - 1}: "
                             f"{used.tolist()}")


def paged_attention(q, k_cache, v_cache, block_tables, context_lens, query_starts,
                    scale: float, *, out_scale: torch.Tensor | None = None,
                    launcher: Launcher = run_kernel) -> torch.Tensor:
    """Causal attention of ragged queries over a paged KV cache (see the kernel's module,
    `det_suite.kernels.bi_attention`, for the layout). q (T, Hq, D) bf16/fp16; k_cache,
    v_cache (num_blocks, block_size, Hkv, D) of q's dtype; block_tables (R, max_blocks),
    context_lens (R,), query_starts (R + 1,) int32. Returns (T, Hq, D) in q's dtype.

    With out_scale (float32, one element: the o projection's static input scale) it returns
    that projection's input instead, (T, Hq * D) float8_e4m3fn, byte for byte
    `quantize_fp8(paged_attention(...).reshape(T, -1), out_scale)`: the kernel that ends
    the op quantizes its rows as it stores them, so no quantization launch follows.

    A decode call (T == R) takes the split shape, its contexts' segments spread over
    programs (`kernels.bi_attention_split`, then `kernels.bi_attention_combine`, with an
    fp32 workspace sized by block_tables' width, so CUDA Graph capture works); any other
    call the tile kernel. Both reduce a query identically: the same bits either way."""
    q = require_tensor(q, "q")
    require_dtype(q, "q", HALF_DTYPES)
    _require_dim(q, "q", 3, "(T, Hq, D)")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        require_tensor(cache, name)
        if cache.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype ({q.dtype}); got {cache.dtype}")
        _require_dim(cache, name, 4, "(num_blocks, block_size, Hkv, D)")
        _require_unit_last_stride(cache, name)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} differs from k_cache's "
                         f"{tuple(k_cache.shape)}")
    num_tokens, num_q_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, cache_dim = k_cache.shape
    if cache_dim != head_dim:
        raise ValueError(f"k_cache head_dim {cache_dim} differs from q's {head_dim}")
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"head_dim must be a power of two >= 16 (a tl.dot operand); "
                         f"got {head_dim}")
    if num_kv_heads == 0 or num_q_heads % num_kv_heads:
        raise ValueError(f"q's {num_q_heads} heads must be a multiple of the cache's "
                         f"{num_kv_heads} KV heads")
    block_tables = _check_index(block_tables, "block_tables", "(R, max_blocks)", 2)
    context_lens = _check_index(context_lens, "context_lens", "(R,)", 1)
    query_starts = _check_index(query_starts, "query_starts", "(R + 1,)", 1)
    num_requests = context_lens.shape[0]
    if block_tables.shape[0] != num_requests or query_starts.shape[0] != num_requests + 1:
        raise ValueError(f"block_tables {tuple(block_tables.shape)}, context_lens "
                         f"{tuple(context_lens.shape)} and query_starts "
                         f"{tuple(query_starts.shape)} must describe the same R requests "
                         "((R, max_blocks), (R,), (R + 1,))")
    if block_tables.shape[1] and block_tables.stride(1) != 1:
        raise ValueError("block_tables must be contiguous along its last dimension")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive float; got {scale!r}")
    quantize_out = out_scale is not None
    if quantize_out:
        out_scale = validate_scale(out_scale, "out_scale")
    require_same_device({"q": q, "k_cache": k_cache, "v_cache": v_cache,
                         "block_tables": block_tables, "context_lens": context_lens,
                         "query_starts": query_starts, "out_scale": out_scale})
    _require_unit_last_stride(q, "q")
    if q.device.type == "cpu":
        _check_attention_values(num_tokens, block_tables, context_lens, query_starts,
                                num_blocks, block_size)
    out = torch.empty(q.shape, dtype=FP8_DTYPE if quantize_out else q.dtype, device=q.device)
    result = out.reshape(num_tokens, num_q_heads * head_dim) if quantize_out else out
    if num_tokens == 0 or num_requests == 0:
        return result
    tensors = dict(q=q, k_cache=k_cache, v_cache=v_cache, out=out, out_scale=out_scale,
                   block_tables=block_tables, context_lens=context_lens,
                   query_starts=query_starts)
    if attention_splits_kv(num_tokens, num_requests):
        max_blocks = block_tables.shape[1]
        for role, shape in attention_workspace_shapes(num_tokens, num_q_heads, head_dim,
                                                      block_size, max_blocks).items():
            tensors[role] = torch.empty(shape, dtype=torch.float32, device=q.device)
        calls = attention_split_launch_spec(num_tokens, num_requests, num_q_heads,
                                            num_kv_heads, head_dim, block_size, max_blocks,
                                            float(scale), quantize_out=quantize_out)
    else:
        calls = (attention_launch_spec(num_tokens, num_requests, num_q_heads, num_kv_heads,
                                       head_dim, block_size, float(scale),
                                       quantize_out=quantize_out),)
    for call in calls:
        _launch(call, tensors, launcher)
    return result


def write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    """Store new tokens' keys and values, k / v (T, Hkv, D), into the caches at
    slot_mapping (T,) int64, slot = block * block_size + offset. A plain copy: no
    arithmetic, so nothing to keep invariant."""
    for name, t in (("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache),
                    ("slot_mapping", slot_mapping)):
        require_tensor(t, name)
    require_dtype(slot_mapping, "slot_mapping", (torch.int64,))
    if k.shape != v.shape or k.dim() != 3:
        raise ValueError(f"k and v must be (T, Hkv, D) of one shape; got {tuple(k.shape)} "
                         f"and {tuple(v.shape)}")
    if k_cache.shape != v_cache.shape or k_cache.dim() != 4 \
            or k_cache.shape[2:] != k.shape[1:]:
        raise ValueError(f"k_cache / v_cache must be (num_blocks, block_size, "
                         f"{k.shape[1]}, {k.shape[2]}); got {tuple(k_cache.shape)} and "
                         f"{tuple(v_cache.shape)}")
    if k.dtype != k_cache.dtype or v.dtype != v_cache.dtype:
        raise TypeError(f"k / v ({k.dtype}, {v.dtype}) must have the caches' dtype "
                        f"({k_cache.dtype}, {v_cache.dtype})")
    if tuple(slot_mapping.shape) != (k.shape[0],):
        raise ValueError(f"slot_mapping must be ({k.shape[0]},); got "
                         f"{tuple(slot_mapping.shape)}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous (a slot is a flat row)")
    rows = k_cache.shape[0] * k_cache.shape[1]
    k_cache.view(rows, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
    v_cache.view(rows, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)


# ------------------------------------------------------------------ q/k norm, RoPE, KV write

def _require_dtype_of(t: torch.Tensor, name: str, like: torch.Tensor, like_name: str) -> None:
    if t.dtype != like.dtype:
        raise TypeError(f"{name} must have {like_name}'s dtype ({like.dtype}); got {t.dtype}")


def _require_shape(t: torch.Tensor, name: str, shape: tuple, what: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must be {what} = {tuple(shape)}; got {tuple(t.shape)}")


def _check_slots(slot_mapping: torch.Tensor, num_slots: int) -> None:
    if slot_mapping.numel() and (int(slot_mapping.min()) < 0
                                 or int(slot_mapping.max()) >= num_slots):
        raise ValueError(f"slot_mapping must name slots 0..{num_slots - 1} of the caches; got "
                         f"{slot_mapping.tolist()}")


def qk_norm_rope_write(q, k, v, q_weight, k_weight, eps: float, cos, sin, k_cache, v_cache,
                       slot_mapping, *, launcher: Launcher = run_kernel) -> torch.Tensor:
    """An attention block's q/k RMSNorm, RoPE and KV-cache write in one launch, bit for bit
    `rms_norm` on q and k, `models.qwen3.apply_rope` on both, then `write_kv`. Returns q_out
    (T, Hq, D); the rotated keys and v go to k_cache / v_cache at slot_mapping.

    q (T, Hq, D), k and v (T, Hkv, D): bf16/fp16, each head's D values contiguous (a row
    is read as rms_norm reads one; token and head strides are free, so q, k and v may be
    column views of one fused q/k/v projection output); q_weight, k_weight (D,) of
    one float dtype; cos, sin (T, D) of q's dtype (torch would promote otherwise); k_cache,
    v_cache (num_blocks, block_size, Hkv, D) of q's dtype, contiguous; slot_mapping (T,)
    int64, slot = block * block_size + offset. Slots are checked on CPU tensors only (on a
    GPU that would sync; a slot outside the cache is not written there)."""
    q = require_tensor(q, "q")
    require_dtype(q, "q", HALF_DTYPES)
    _require_dim(q, "q", 3, "(T, Hq, D)")
    num_tokens, num_q_heads, head_dim = q.shape
    for name, t in (("k", k), ("v", v)):
        require_tensor(t, name)
        _require_dtype_of(t, name, q, "q")
        _require_dim(t, name, 3, "(T, Hkv, D)")
    num_kv_heads = k.shape[1]
    for name, t in (("k", k), ("v", v)):
        _require_shape(t, name, (num_tokens, num_kv_heads, head_dim), "(T, Hkv, D)")
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim (q's last dimension) must be even for RoPE's halves; got "
                         f"{head_dim}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _require_unit_last_stride(t, name)
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        require_tensor(w, name)
        require_dtype(w, name, FLOAT_DTYPES)
        _require_shape(w, name, (head_dim,), "(D,)")
        _require_unit_last_stride(w, name)
    _require_dtype_of(k_weight, "k_weight", q_weight, "q_weight")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0.0:
        raise ValueError(f"eps must be a non-negative float; got {eps!r}")
    for name, t in (("cos", cos), ("sin", sin)):
        require_tensor(t, name)
        _require_dtype_of(t, name, q, "q")
        _require_shape(t, name, (num_tokens, head_dim), "(T, D)")
        _require_unit_last_stride(t, name)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        require_tensor(cache, name)
        _require_dtype_of(cache, name, q, "q")
        _require_dim(cache, name, 4, "(num_blocks, block_size, Hkv, D)")
        if tuple(cache.shape[2:]) != (num_kv_heads, head_dim):
            raise ValueError(f"{name} must be (num_blocks, block_size, {num_kv_heads}, "
                             f"{head_dim}); got {tuple(cache.shape)}")
        if not cache.is_contiguous():
            raise ValueError(f"{name} must be contiguous (a slot is a flat row); got strides "
                             f"{cache.stride()}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} differs from k_cache's "
                         f"{tuple(k_cache.shape)}")
    slot_mapping = require_tensor(slot_mapping, "slot_mapping")
    require_dtype(slot_mapping, "slot_mapping", (torch.int64,))
    _require_shape(slot_mapping, "slot_mapping", (num_tokens,), "(T,)")
    _require_unit_last_stride(slot_mapping, "slot_mapping")
    require_same_device({"q": q, "k": k, "v": v, "q_weight": q_weight, "k_weight": k_weight,
                         "cos": cos, "sin": sin, "k_cache": k_cache, "v_cache": v_cache,
                         "slot_mapping": slot_mapping})
    num_slots = k_cache.shape[0] * k_cache.shape[1]
    if q.device.type == "cpu":
        _check_slots(slot_mapping, num_slots)
    q_out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if num_tokens == 0 or num_q_heads + num_kv_heads == 0:
        return q_out
    call = qk_norm_rope_launch_spec(num_tokens, num_q_heads, num_kv_heads, head_dim,
                                    num_slots, float(eps), pdl=programmatic_launch(q.device))
    _launch(call, dict(q=q, k=k, v=v, q_weight=q_weight, k_weight=k_weight, cos=cos, sin=sin,
                       k_cache=k_cache, v_cache=v_cache, slot_mapping=slot_mapping,
                       q_out=q_out), launcher)
    return q_out


__all__ = ["ATTENTION_TILE", "bf16_linear", "log_softmax", "paged_attention",
           "qk_norm_rope_write", "rms_norm", "write_kv"]
