"""fp8_scaled_mm_segmented: several FP8 GEMMs over one K as one launch (a layer's q/k/v or
gate/up). Each column segment must give, bit for bit, the GEMM of its own activation,
weight rows, scales and bias run under the same launch config, on every launch shape
(pointer/TMA loads, swapped operands, split-K in registers, workspace + fused fix-up or
reduce kernel), and a row must not depend on the other rows of the call.

CPU runs use the interpreter on small shapes; the GPU cases use Qwen3-8B's stacked q/k/v
and gate/up at decode and prefill row counts."""

from dataclasses import replace

import pytest
import torch

from det_suite.models.catalog import model_dims
from det_suite.ops import fp8_scaled_mm, fp8_scaled_mm_segmented, segments_fit
from det_suite.policy import shipped_policy

SCALES = {"a": (0.5, 0.25, 2.0), "w": (0.011, 0.031, 0.0023)}
CPU_SEGMENTS = {"three": (128, 64, 64), "two": (64, 128)}
CPU_K = 320   # two 256-wide BLOCK_K tiles, the second a 64-wide tail on the sm90 tiles


def _operands(segments, k, m, device, *, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, s = sum(segments), len(segments)
    a = (torch.randn(s, m, k, generator=g) * 3).to(torch.float8_e4m3fn).to(device)
    w = (torch.randn(n, k, generator=g) * 2).to(torch.float8_e4m3fn).to(device)
    a_scales = torch.tensor(SCALES["a"][:s], device=device)
    w_scales = torch.tensor(SCALES["w"][:s], device=device)
    b = (torch.randn(n, generator=g)).to(torch.bfloat16).to(device) if bias else None
    return a, w, a_scales, w_scales, b


def _separately(a, w, a_scales, w_scales, bias, segments, config=None, **options):
    """Each segment as its own fp8_scaled_mm under `config` (None: the policy's), with
    `options` (e.g. out_dtype), concatenated."""
    outs, start = [], 0
    for s, width in enumerate(segments):
        cols = slice(start, start + width)
        outs.append(fp8_scaled_mm(a[s], w[cols], a_scales[s:s + 1].clone(),
                                  w_scales[s:s + 1].clone(),
                                  None if bias is None else bias[cols], config=config,
                                  **options))
        start += width
    return torch.cat(outs, dim=1)


def _sm90_config(m, n, k, **launch):
    return replace(shipped_policy("sm90").select(m, n, k), **launch)


LAUNCHES = {
    "swap-tma-single-pass": dict(swap_ab=True, use_tma=True, block_m=16, block_n=64),
    "pointer-single-pass": dict(swap_ab=False, use_tma=False, block_m=16, block_n=64),
    "tma-split2-registers": dict(swap_ab=False, use_tma=True, block_m=16, block_n=64,
                                 split_k=2, use_workspace=False),
    "swap-split2-fused-fixup": dict(swap_ab=True, use_tma=True, block_m=16, block_n=64,
                                    split_k=2, use_workspace=True, fused_fixup=True),
    "pointer-split2-reduce-kernel": dict(swap_ab=False, use_tma=False, block_m=16,
                                         block_n=64, split_k=2, use_workspace=True,
                                         fused_fixup=False),
}


@pytest.mark.parametrize("launch", list(LAUNCHES.values()), ids=list(LAUNCHES))
@pytest.mark.parametrize("segments", list(CPU_SEGMENTS.values()), ids=list(CPU_SEGMENTS))
def test_each_segment_equals_its_own_gemm(segments, launch, device):
    a, w, a_scales, w_scales, bias = _operands(segments, CPU_K, 5, device)
    config = _sm90_config(5, sum(segments), CPU_K, use_pdl=False, **launch)
    got = fp8_scaled_mm_segmented(a, w, a_scales, w_scales, segments, bias, config=config)
    assert torch.equal(got, _separately(a, w, a_scales, w_scales, bias, segments, config))


def test_without_bias_and_in_fp16(device):
    segments = CPU_SEGMENTS["three"]
    a, w, a_scales, w_scales, _ = _operands(segments, CPU_K, 3, device, bias=False)
    config = _sm90_config(3, sum(segments), CPU_K, use_pdl=False)
    got = fp8_scaled_mm_segmented(a, w, a_scales, w_scales, segments, out_dtype=torch.float16,
                                  config=config)
    want = _separately(a, w, a_scales, w_scales, None, segments, config,
                       out_dtype=torch.float16)
    assert got.dtype == torch.float16 and torch.equal(got, want)


def test_segments_read_their_own_activation_and_scales(device):
    """Counterpart: with the activations or the scales of two segments exchanged the result
    differs, so the equality above cannot hold by accident of one shared operand."""
    segments = CPU_SEGMENTS["three"]
    a, w, a_scales, w_scales, bias = _operands(segments, CPU_K, 4, device)
    config = _sm90_config(4, sum(segments), CPU_K, use_pdl=False)
    base = fp8_scaled_mm_segmented(a, w, a_scales, w_scales, segments, bias, config=config)
    swapped_a = a[[1, 0, 2]].contiguous()
    swapped_scales = a_scales[[0, 2, 1]].contiguous()
    assert not torch.equal(base, fp8_scaled_mm_segmented(swapped_a, w, a_scales, w_scales,
                                                         segments, bias, config=config))
    assert not torch.equal(base, fp8_scaled_mm_segmented(a, w, swapped_scales, w_scales,
                                                         segments, bias, config=config))


ROWS = {"one-row": slice(3, 4), "middle": slice(2, 9), "tail": slice(17, 20)}


@pytest.mark.parametrize("rows", list(ROWS.values()), ids=list(ROWS))
def test_rows_alone_equal_the_rows_inside_a_larger_call(rows, device):
    """Batch invariance through the policy: the 20-row call and the few-row call pick
    different tiles (M selects among the entry's m-tiles), never another schedule."""
    segments = CPU_SEGMENTS["two"]
    a, w, a_scales, w_scales, bias = _operands(segments, CPU_K, 20, device)
    full = fp8_scaled_mm_segmented(a, w, a_scales, w_scales, segments, bias)
    part = fp8_scaled_mm_segmented(a[:, rows].contiguous(), w, a_scales, w_scales, segments,
                                   bias)
    assert torch.equal(part, full[rows])


def test_zero_rows_give_an_empty_output(device):
    segments = CPU_SEGMENTS["two"]
    a, w, a_scales, w_scales, bias = _operands(segments, CPU_K, 0, device)
    out = fp8_scaled_mm_segmented(a, w, a_scales, w_scales, segments, bias)
    assert out.shape == (0, sum(segments))


def _bad(**change):
    def make(device):
        segments = CPU_SEGMENTS["three"]
        a, w, a_scales, w_scales, bias = _operands(segments, CPU_K, 2, device)
        args = dict(a=a, weight=w, a_scales=a_scales, weight_scales=w_scales,
                    segments=segments, bias=bias)
        args.update({key: fn(args) for key, fn in change.items()})
        return args
    return make


BAD_INPUTS = {
    "one-segment": (_bad(segments=lambda x: (256,)), ValueError, "segments must be 2 to 3"),
    "four-segments": (_bad(segments=lambda x: (64, 64, 64, 64)), ValueError,
                      "segments must be 2 to 3"),
    "widths-miss-n": (_bad(segments=lambda x: (128, 64, 32)), ValueError,
                      "must sum to the weight's N"),
    "a-segment-count": (_bad(a=lambda x: x["a"][:2]), ValueError, r"a must be \(3, M, K\)"),
    "a-not-stacked": (_bad(a=lambda x: x["a"].transpose(0, 1).contiguous().transpose(0, 1)),
                      ValueError, "one buffer of stacked rows"),
    "a-scales-count": (_bad(a_scales=lambda x: x["a_scales"][:2]), ValueError,
                       r"a_scales must be a contiguous \(3,\) tensor"),
    "weight-scale-negative": (_bad(weight_scales=lambda x: -x["weight_scales"]), ValueError,
                              "weight_scales must all be finite and positive"),
    "a-bf16": (_bad(a=lambda x: x["a"].to(torch.bfloat16)), TypeError,
               "a must have dtype float8_e4m3fn"),
}


@pytest.mark.parametrize("make, error, message", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_bad_input_is_refused_naming_the_argument(make, error, message, device):
    with pytest.raises(error, match=message):
        fp8_scaled_mm_segmented(**make(device))


def test_a_segment_ending_inside_a_tile_is_refused(device):
    segments = (96, 96, 64)
    a, w, a_scales, w_scales, bias = _operands(segments, CPU_K, 2, device)
    config = _sm90_config(2, 256, CPU_K, use_pdl=False, block_n=64)
    with pytest.raises(ValueError, match="multiple of the tile's BLOCK_N 64"):
        fp8_scaled_mm_segmented(a, w, a_scales, w_scales, segments, bias, config=config)


@pytest.mark.parametrize("segments, fits", [((4096, 1024, 1024), True), ((96, 96, 64), False),
                                            ((64,), False)], ids=["qwen3-8b-qkv", "ragged",
                                                                  "one-segment"])
def test_segments_fit_asks_every_tile_of_the_stacked_shape(segments, fits):
    policy = shipped_policy("sm90").on_device(132)
    assert segments_fit(segments, 4096, torch.device("cpu"), policy) is fits


# ------------------------------------------------------------------ GPU

def _qwen3_8b_stacks():
    d = model_dims("qwen3-8b")
    qkv = (d.heads * d.head_dim, d.kv_heads * d.head_dim, d.kv_heads * d.head_dim)
    return {"qkv": (qkv, d.hidden), "gate_up": ((d.intermediate, d.intermediate), d.hidden)}


GPU_STACKS = _qwen3_8b_stacks()
GPU_ROWS = (1, 7, 300)


@pytest.mark.gpu
@pytest.mark.parametrize("m", GPU_ROWS, ids=lambda m: f"m{m}")
@pytest.mark.parametrize("stack", list(GPU_STACKS), ids=list(GPU_STACKS))
def test_gpu_stacked_qwen3_8b_projections_equal_the_separate_gemms(stack, m):
    """At Qwen3-8B's shapes each segment equals its projection's own GEMM launched with
    its own shape's policy (both schedules are split 1 of BLOCK_K 256 there): stacking the
    engine's projections changes no bit of the model."""
    segments, k = GPU_STACKS[stack]
    a, w, a_scales, w_scales, _ = _operands(segments, k, m, "cuda", bias=False, seed=m)
    got = fp8_scaled_mm_segmented(a, w, a_scales, w_scales, segments)
    assert torch.equal(got, _separately(a, w, a_scales, w_scales, None, segments))


@pytest.mark.gpu
@pytest.mark.parametrize("stack", list(GPU_STACKS), ids=list(GPU_STACKS))
def test_gpu_decode_rows_equal_the_same_rows_inside_a_prefill(stack):
    segments, k = GPU_STACKS[stack]
    a, w, a_scales, w_scales, _ = _operands(segments, k, 1000, "cuda", bias=False)
    full = fp8_scaled_mm_segmented(a, w, a_scales, w_scales, segments)
    for m in (1, 7, 33):
        rows = fp8_scaled_mm_segmented(a[:, -m:].contiguous(), w, a_scales, w_scales, segments)
        assert torch.equal(rows, full[-m:])
