"""fp8_linear: accuracy against a float32 reference, and bit-exact batch invariance.

CPU runs use the Triton interpreter on small shapes; the GPU cases use real Qwen3 shapes,
one test id per (family, shape, stages, M, dtype, bias, layout) case.
"""

import functools
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from det_suite.invariance.cases import DTYPES as DTYPES_BY_NAME
from det_suite.invariance.cases import SHAPE_PRESETS, apply_layout, stress_operands
from det_suite.invariance.providers import control_provider, served_policy
from det_suite.ops import fp8_linear, fp8_scaled_mm, quantize_fp8
from det_suite.policy import shipped_policy
from det_suite.policy.tiles import promotion_k
from det_suite.models.synthetic_linear import make_activations, make_fp8_linear
from det_suite.pytest_plugin.families import family_cases

DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]
# The reference multiplies the very FP8 operands the kernel sees, so only two errors remain:
# output rounding (<= 2**-8 relative) and accumulation. Hopper's FP8 wgmma accumulates with
# fewer mantissa bits than fp32 between promotions (Triton's default, like the seed's
# kernel), which on the H200 left isolated outputs ~1% of max|ref| off at K = 12288.
# So: norm-relative error within 1e-2 (METHOD.md's range for 8-bit-mantissa operand
# products) and no element off by more than 5% of max|ref| - a wrong or unwritten tile is
# off by ~100% and fails both.
NORM_REL_TOL = 1e-2
MAX_ABS_REL_TOL = 5e-2
CPU_SHAPES = [pytest.param(96, 80, id="n96-k80-tail"), pytest.param(64, 256, id="n64-k256"),
              pytest.param(80, 200, id="n80-k200-tail")]
# Real projection shapes from the catalog (Qwen3-8B/14B) and a K=80 tail.
GPU_SHAPES = SHAPE_PRESETS["gpu"]
GPU_SUFFIX_M = (1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000)
GPU_STAGES = (2, 3)
GPU_FULL_M = 4097
CPU_SUFFIX_M = (1, 2, 15, 16, 17, 31, 32, 33, 127, 128, 129)
CPU_FULL_M = 160
# SM90's launch shapes (TMA, split-K fix-ups, swapped operands) compared on the family's own
# tiles: BLOCK_K is its FP32 promotion interval (policy/tiles.py FAMILY_PROMOTE_K), so the
# configs run on an H200 exactly as shipped. K = BLOCK_K + 80 is two tiles, the second an
# 80-wide masked tail (three ways it leaves a chunk empty); K = 8 * BLOCK_K is eight tiles,
# split 2 and 4 ways evenly and 3 ways unevenly (3, 3, 2).
SM90_BLOCK_K = promotion_k("sm90")
# A device name for tests that fake CUDA's answers (torch.cuda is patched): no GPU needed.
FAKED_GPU = "cuda"
SM90_TAIL_K, SM90_EIGHT_TILES_K = SM90_BLOCK_K + 80, 8 * SM90_BLOCK_K
SM90_SHAPES = [pytest.param(96, SM90_TAIL_K, id="n96-k-tail"),
               pytest.param(64, SM90_EIGHT_TILES_K, id="n64-k-eight-tiles")]


def reference(x, layer):
    """float32 product of the dequantized operands, quantized by torch's own float8 cast
    (not det-suite's quantizer, so a quantizer bug cannot hide in both sides)."""
    x2d = x.reshape(-1, layer.k).float()
    q = (x2d / layer.input_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()
    y = (q @ layer.weight.float().t()) * (layer.input_scale * layer.weight_scale)
    if layer.bias is not None:
        y = y + layer.bias.float()
    return y.reshape(*x.shape[:-1], layer.n)


def assert_close_to_reference(y, ref, dtype):
    assert y.dtype == dtype
    y = y.float()
    assert not torch.isnan(y).any(), "NaN in output"
    norm_rel = ((y - ref).norm() / ref.norm()).item()
    max_abs = (y - ref).abs().max().item()
    scale = ref.abs().max().item()
    print(f"norm-relative error {norm_rel:.3g}, max abs error {max_abs:.3g} (max|ref| {scale:.3g})")
    assert norm_rel <= NORM_REL_TOL
    assert max_abs <= MAX_ABS_REL_TOL * scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("n,k", CPU_SHAPES)
def test_matches_float32_reference(n, k, with_bias, dtype, device):
    x = make_activations(37, k, dtype=dtype, device=device)
    layer = make_fp8_linear(n, k, bias_dtype=dtype if with_bias else None, device=device,
                            calibration=x)
    y = fp8_linear(x, layer.weight, layer.weight_scale, layer.input_scale, layer.bias)
    assert y.dtype == dtype and y.shape == (37, n)
    assert_close_to_reference(y, reference(x, layer), dtype)


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_sglang_column_major_weight_matches_nk_layout(layout, device):
    x = make_activations(20, 256, device=device)
    layer = make_fp8_linear(64, 256, device=device, calibration=x)
    weight = layer.weight if layout == "nk" else layer.weight.t()
    y = fp8_linear(x, weight, layer.weight_scale, layer.input_scale)
    y_nk = fp8_linear(x, layer.weight, layer.weight_scale, layer.input_scale)
    assert torch.equal(y, y_nk)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_3d_input_matches_contiguous(dtype, device):
    base = make_activations(2 * 24 * 2, 128, dtype=dtype, device=device).reshape(2, 48, 128)
    x = base[:, ::2, :]  # (2, 24, 128), non-contiguous leading dims
    assert not x.is_contiguous()
    layer = make_fp8_linear(64, 128, bias_dtype=dtype, device=device, calibration=x)
    y = fp8_linear(x, layer.weight, layer.weight_scale, layer.input_scale, layer.bias)
    y_contig = fp8_linear(x.contiguous(), layer.weight, layer.weight_scale, layer.input_scale,
                          layer.bias)
    assert y.shape == (2, 24, 64)
    assert torch.equal(y, y_contig)


def test_empty_batch_returns_empty_output(device):
    layer = make_fp8_linear(64, 128, device=device)
    x = torch.empty(0, 128, dtype=torch.bfloat16, device=device)
    y = fp8_linear(x, layer.weight, layer.weight_scale, layer.input_scale)
    assert y.shape == (0, 64) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("device_type,sm_count", [(FAKED_GPU, 132), ("cpu", None)],
                         ids=["cuda-device", "cpu"])
def test_device_policy_serves_a_given_table_on_the_devices_sm_count(monkeypatch, device_type,
                                                                    sm_count):
    """A user's table (`bench gemm --policy-file`) serves the device as the shipped one does:
    shapes it does not name take the generic rule for the device's SM count (the CUDA device
    is faked, so the lookup itself is what runs)."""
    import det_suite.ops.linear as linear

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: SimpleNamespace(multi_processor_count=132))
    monkeypatch.setattr(linear, "sm_count", linear.sm_count.__wrapped__)
    served = linear.device_policy(torch.device(device_type), shipped_policy("sm90"))
    origin = "rule" if sm_count else "default"
    assert (served.sm_count, served.entry_origin(96, SM90_TAIL_K)) == (sm_count, origin)


def det_suite_linear(num_stages=None, policy=None):
    def linear(x, weight, weight_scale, input_scale, bias):
        return fp8_linear(x, weight, weight_scale, input_scale, bias, num_stages=num_stages,
                          policy=policy)
    return linear


def control_linear(device):
    """The positive control: det-suite's kernel with BLOCK_K and split-K chosen by M."""
    return control_provider(device)


def _suffix_mismatches(n, k, full_m, ms, dtype, device, linear, seed=0, equal=torch.equal):
    """Rows of an m-row call vs the same rows at the end of a full_m-row call, on inputs
    that expose any change of reduction schedule (cancelling pairs)."""
    problem, x = stress_operands(n, k, full_m, device=device, dtype=dtype, bias=True,
                                 seed=seed)
    args = problem.args()
    full = linear(x, *args)
    mismatched = [m for m in ms if not equal(linear(x[-m:], *args), full[-m:])]
    return mismatched, len(ms)


@pytest.mark.parametrize("stages", [2, 3], ids=["2-stage", "3-stage"])
@pytest.mark.parametrize("n,k", CPU_SHAPES)
def test_cached_suffix_rows_bit_exact_across_m_boundaries(n, k, stages, device, bit_exact):
    mismatched, count = _suffix_mismatches(n, k, CPU_FULL_M, CPU_SUFFIX_M, "bf16", device,
                                           det_suite_linear(num_stages=stages),
                                           equal=bit_exact)
    print(f"{count} suffix comparisons, {len(mismatched)} mismatching")
    assert mismatched == []


@pytest.mark.parametrize("n,k", CPU_SHAPES)
def test_cached_suffix_comparison_flags_an_m_dependent_schedule(n, k, device, bit_exact):
    """Counterpart of the test above, through the same comparison: the control's schedule
    changes at M = 32, so suffixes of up to 32 rows must differ from the full call."""
    mismatched, count = _suffix_mismatches(n, k, CPU_FULL_M, CPU_SUFFIX_M, "bf16", device,
                                           control_linear(device), equal=bit_exact)
    print(f"{count} suffix comparisons, {len(mismatched)} mismatching: {mismatched}")
    assert {m for m in CPU_SUFFIX_M if m <= 32} <= set(mismatched)


def _stress_layer(n, k, m, device, dtype="bf16"):
    problem, x = stress_operands(n, k, m, device=device, dtype=dtype, bias=True)
    return problem, x, quantize_fp8(x, problem.input_scale)


def _gemm(a, problem, config):
    return fp8_scaled_mm(a, problem.weight, problem.input_scale, problem.weight_scale,
                         problem.bias, config=config)


@pytest.mark.parametrize("n,k", CPU_SHAPES)
def test_two_and_three_stage_pipelines_bit_exact(n, k, device):
    problem, x, _ = _stress_layer(n, k, 50, device)
    args = (x, *problem.args())
    assert torch.equal(fp8_linear(*args, num_stages=2), fp8_linear(*args, num_stages=3))


@pytest.mark.parametrize("split_k", [2, 3, 4])
def test_workspace_and_single_pass_split_k_bit_exact(split_k, device):
    """The two launch shapes of one split-K schedule compute identical arithmetic."""
    problem, _, a = _stress_layer(64, 512, 40, device)
    base = shipped_policy("sm120").select(40, 64, 512)
    outs = [_gemm(a, problem, replace(base, block_k=64, split_k=split_k, use_workspace=ws))
            for ws in (False, True)]
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("family,n,k,block_k", [
    pytest.param("sm120", 64, 512, 64, id="sm120-k512-bk64"),
    pytest.param("sm90", 64, SM90_EIGHT_TILES_K, SM90_BLOCK_K, id="sm90-eight-tiles")])
def test_launch_shape_comparison_flags_another_split(family, n, k, block_k, device):
    """Counterpart of the kernel-against-kernel comparisons in this file: on these inputs a
    3-way split and a 4-way split of the same K differ, so a launch shape that split or
    combined differently from its partner would be flagged."""
    problem, _, a = _stress_layer(n, k, 40, device)
    base = replace(shipped_policy(family).select(40, n, k), block_k=block_k,
                   use_workspace=True)
    assert not torch.equal(_gemm(a, problem, replace(base, split_k=3)),
                           _gemm(a, problem, replace(base, split_k=4)))


EPILOGUE_LAUNCHES = [
    pytest.param(dict(split_k=1, use_workspace=False), id="single-pass"),
    pytest.param(dict(split_k=3, use_workspace=True, fused_fixup=True), id="split3-fused-fixup"),
    pytest.param(dict(split_k=3, use_workspace=True, fused_fixup=False), id="split3-reduce-kernel"),
]


def _exact_accumulator_operands(device):
    """FP8 operands of small integers, K = 192: every partial sum is an integer below
    2**24, so the fp32 accumulator is exact in any order and the epilogue alone rounds."""
    gen = torch.Generator().manual_seed(7)
    a = torch.randint(-4, 5, (6, 192), generator=gen).float()
    w = torch.randint(-4, 5, (80, 192), generator=gen).float()
    return a.to(torch.float8_e4m3fn).to(device), w.to(torch.float8_e4m3fn).to(device), a @ w.t()


@pytest.mark.parametrize("launch", EPILOGUE_LAUNCHES)
def test_epilogue_is_scale_then_bias_in_two_fp32_roundings(launch, device):
    """out = cast(fp32(fp32(acc * (a_scale * b_scale)) + bias)), never a fused multiply-add.
    Row 0's bias is minus its rounded product, so the two roundings give exactly 0 where an
    FMA gives the product's rounding error: any contraction of the epilogue is seen."""
    a, w, acc = _exact_accumulator_operands(device)
    a_scale = torch.tensor([0.0173], device=device)
    b_scale = torch.tensor([0.37], device=device)
    scale = a_scale.cpu() * b_scale.cpu()
    product = acc * scale
    bias = -product[0].clone()
    bias[::7] = 0.25  # some columns keep an ordinary bias
    expected = (product + bias).to(torch.bfloat16)
    config = replace(shipped_policy("sm120").select(6, 80, 192), block_k=32, **launch)
    y = fp8_scaled_mm(a, w, a_scale, b_scale, bias.to(device), config=config)
    fused = (acc.double() * scale.double() + bias.double()).float().to(torch.bfloat16)
    assert not torch.equal(fused, expected)  # counterpart: an FMA epilogue would differ
    assert torch.equal(y.cpu(), expected)


@pytest.mark.parametrize("value,expected", [(float("inf"), 448.0), (-float("inf"), -448.0),
                                            (1e6, 448.0)], ids=["+inf", "-inf", "beyond-range"])
def test_out_of_range_activations_saturate(value, expected, device):
    layer = make_fp8_linear(64, 128, device=device)
    x = torch.zeros(2, 128, dtype=torch.bfloat16, device=device)
    x[0, 0] = value
    q = quantize_fp8(x, layer.input_scale)
    assert q[0, 0].float().item() == expected


# ------------------------------------------------------------------ GPU, one id per case
# Each (family, shape, stages, M, dtype, bias, layout) case is its own test: a failure names
# the case, and `pytest -m sm120` on an SM12x runner runs the sm120 cases (family_cases
# marks each family's cases gpu + its arch marker; elsewhere they skip with the reason).
# Each case runs the family's table explicitly, so under --det-arch-as it tests that table.


def _gpu_linear(family, stages=None):
    # The table as served on this GPU: unnamed shapes (the K=80 tail) on the generic rule.
    return det_suite_linear(num_stages=stages, policy=served_policy(family, "cuda"))


@functools.lru_cache(maxsize=1)
def _full_call(family, shape, stages):
    """The 4097-row call the suffix cases of one (family, shape, stages) slice; the cases
    run consecutively, so one is kept."""
    problem, x = stress_operands(shape.n, shape.k, GPU_FULL_M, device="cuda", dtype="bf16",
                                 bias=True)
    return problem, x, _gpu_linear(family, stages)(x, *problem.args())


SUFFIX_CASES = family_cases((f"{shape.name}-s{stages}-m{m}", (shape, stages, m))
                            for shape in GPU_SHAPES for stages in GPU_STAGES
                            for m in GPU_SUFFIX_M)


@pytest.mark.gpu
@pytest.mark.parametrize("family, shape, stages, m", SUFFIX_CASES)
def test_gpu_cached_suffix_rows_bit_exact_inside_4097_row_call(family, shape, stages, m,
                                                               bit_exact):
    problem, x, full = _full_call(family, shape, stages)
    suffix = _gpu_linear(family, stages)(x[-m:], *problem.args())
    assert bit_exact(suffix, full[-m:])


CONTROL_SUFFIX_M = (1, 16, 32)


@pytest.mark.gpu
@pytest.mark.parametrize("family, shape", family_cases(
    (shape.name, (shape,)) for shape in GPU_SHAPES if shape.name.endswith((".o", ".down"))))
def test_gpu_cached_suffix_comparison_flags_an_m_dependent_schedule(family, shape, bit_exact):
    """Counterpart of the suffix cases, through the same comparison on the GPU: the
    control's schedule changes at M = 32, so suffixes of up to 32 rows differ."""
    linear = control_linear("cuda")
    problem, x = stress_operands(shape.n, shape.k, GPU_FULL_M, device="cuda", dtype="bf16",
                                 bias=True)
    full = linear(x, *problem.args())
    same = [m for m in CONTROL_SUFFIX_M if bit_exact(linear(x[-m:], *problem.args()), full[-m:])]
    assert same == []


PIPELINE_ROWS = (1, 33, 4097)


@pytest.mark.gpu
@pytest.mark.parametrize("family, shape, dtype, with_bias", family_cases(
    (f"{shape.name}-{dtype}-{'bias' if bias else 'no-bias'}", (shape, dtype, bias))
    for shape in GPU_SHAPES for dtype in ("bf16", "fp16") for bias in (False, True)))
def test_gpu_two_and_three_stage_pipelines_bit_exact(family, shape, dtype, with_bias,
                                                     bit_exact):
    """Pipeline depth changes when loads happen, never the arithmetic (the seed's A/B)."""
    problem, x = stress_operands(shape.n, shape.k, max(PIPELINE_ROWS), device="cuda",
                                 dtype=dtype, bias=with_bias)
    differing = [m for m in PIPELINE_ROWS
                 if not bit_exact(_gpu_linear(family, 2)(x[-m:], *problem.args()),
                                  _gpu_linear(family, 3)(x[-m:], *problem.args()))]
    assert differing == []


SHAPE_DTYPE_CASES = [(f"{shape.name}-{dtype}", (shape, dtype))
                     for shape in GPU_SHAPES for dtype in ("bf16", "fp16")]


@pytest.mark.gpu
@pytest.mark.parametrize("family, shape, dtype", family_cases(SHAPE_DTYPE_CASES))
def test_gpu_matches_float32_reference(family, shape, dtype):
    torch_dtype = DTYPES_BY_NAME[dtype]
    x = make_activations(300, shape.k, dtype=torch_dtype, device="cuda")
    layer = make_fp8_linear(shape.n, shape.k, bias_dtype=torch_dtype, device="cuda",
                            calibration=x)
    y = _gpu_linear(family)(x, layer.weight, layer.weight_scale, layer.input_scale, layer.bias)
    assert_close_to_reference(y, reference(x, layer), torch_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("family, shape, dtype", family_cases(SHAPE_DTYPE_CASES))
def test_gpu_strided_3d_input_matches_contiguous(family, shape, dtype, bit_exact):
    """A (1, rows, K) view whose rows are padded with NaN: reading past a row poisons it."""
    problem, x = stress_operands(shape.n, shape.k, 300, device="cuda", dtype=dtype, bias=True)
    strided = apply_layout(x, "strided3d")
    assert not strided.is_contiguous()
    y = _gpu_linear(family)(strided, *problem.args())
    assert y.shape == (1, 300, shape.n)
    assert bit_exact(y[0], _gpu_linear(family)(x, *problem.args()))


@pytest.mark.gpu
@pytest.mark.parametrize("family, shape", family_cases((shape.name, (shape,))
                                                       for shape in GPU_SHAPES))
def test_gpu_column_major_weight_matches_nk_layout(family, shape, bit_exact):
    """SGLang passes the weight as a (K, N) column-major view: same bits as [N, K]."""
    problem, x = stress_operands(shape.n, shape.k, 300, device="cuda", bias=True)
    weight, *rest = problem.args()
    linear = _gpu_linear(family)
    assert bit_exact(linear(x, weight.t(), *rest), linear(x, weight, *rest))


@pytest.mark.gpu
@pytest.mark.sm90
def test_gpu_seed_table_m_dependence_is_detected_on_sm90(bit_exact):
    """Positive control on Hopper: the seed's table mixes mma.sync and wgmma there."""
    mismatched, _ = _suffix_mismatches(4096, 12288, GPU_FULL_M, (1, 16, 32), "bf16", "cuda",
                                       det_suite_linear(policy=shipped_policy("sm120")),
                                       equal=bit_exact)
    assert mismatched, "the seed's BLOCK_M 16/32 tiles should differ from BLOCK_M 128 on SM90"


@pytest.mark.parametrize("split_k,use_workspace", [(1, False), (2, False), (2, True)],
                         ids=["unsplit", "split2-single-pass", "split2-workspace"])
@pytest.mark.parametrize("n,k", SM90_SHAPES)
def test_tma_and_pointer_loads_bit_exact(n, k, split_k, use_workspace, device):
    """TMA changes how tiles are fetched, never the arithmetic (zero fill == masked loads)."""
    problem, _, a = _stress_layer(n, k, 70, device)
    base = replace(shipped_policy("sm90").select(70, n, k), block_k=SM90_BLOCK_K,
                   split_k=split_k, use_workspace=use_workspace)
    outs = [_gemm(a, problem, replace(base, use_tma=tma)) for tma in (False, True)]
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("split_k", [3, 4], ids=["split3", "split4"])
@pytest.mark.parametrize("fixup", ["fused", "second-kernel"])
@pytest.mark.parametrize("tma", [False, True], ids=["pointer", "tma"])
def test_split_k_fixup_variants_bit_exact_with_single_pass(fixup, tma, split_k, device):
    """Last-arriving-program fix-up, separate reduction kernel and in-register chunk loop
    are three launch shapes of one schedule."""
    problem, _, a = _stress_layer(96, SM90_EIGHT_TILES_K, 40, device)
    base = replace(shipped_policy("sm90").select(40, 96, SM90_EIGHT_TILES_K), block_k=SM90_BLOCK_K,
                   split_k=split_k, use_tma=tma)
    single = _gemm(a, problem, replace(base, use_workspace=False))
    split = _gemm(a, problem, replace(base, use_workspace=True, fused_fixup=fixup == "fused"))
    assert torch.equal(single, split)


@pytest.mark.parametrize("split_k,use_workspace,fused", [
    (1, False, True), (3, False, True), (3, True, True), (3, True, False)],
    ids=["unsplit", "split3-single-pass", "split3-fused-fixup", "split3-reduce-kernel"])
@pytest.mark.parametrize("m", [1, 5, 17, 40])
@pytest.mark.parametrize("n,k", SM90_SHAPES)
def test_swapped_operands_bit_exact_with_unswapped(n, k, m, split_k, use_workspace, fused,
                                                    device):
    """A swapped tile (weight on the MMA's row side, BLOCK_M tokens on its narrow side)
    gives the unswapped tile's bits. On a GPU this is the claim about the MMA unit the
    sm90 table relies on; under the interpreter it checks indexing, masks and transposes."""
    problem, _, a = _stress_layer(n, k, m, device)
    base = replace(shipped_policy("sm90").select(200, n, k), block_k=SM90_BLOCK_K, block_n=64,
                   split_k=split_k, use_workspace=use_workspace, fused_fixup=fused,
                   use_tma=True)
    unswapped = _gemm(a, problem, replace(base, block_m=64))
    swapped = _gemm(a, problem, replace(base, block_m=16, swap_ab=True))
    assert torch.equal(swapped, unswapped)


def test_swapped_tile_on_unaligned_operands_runs_the_64_row_pointer_kernel(device):
    """TMA needs 16-byte aligned rows; where an operand rules it out, a swapped tile runs
    the pointer kernel with wgmma's 64 rows (never a 16-row mma.sync tile), same bits."""
    from det_suite.ops import gemm_launch_spec

    config = replace(shipped_policy("sm90").select(1, 4096, 4096), block_k=SM90_BLOCK_K,
                     block_n=64)
    assert config.swap_ab and config.block_m < 64
    spec = gemm_launch_spec(config, 3, 64, 256, has_bias=False, use_tma=False)
    kernel = spec.calls[0]
    assert kernel.kernel == "fp8_scaled_mm_kernel"
    assert dict(kernel.constexprs)["BLOCK_M"] == 64

    problem, _, a = _stress_layer(64, 256, 3, device)
    backing = torch.empty(a.numel() + 1, dtype=a.dtype, device=device)
    unaligned = backing[1:].view_as(a)  # base off the 16-byte grid: TMA impossible
    unaligned.copy_(a)
    outs = [_gemm(t, problem, config) for t in (a, unaligned)]
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("use_pdl", [False, True], ids=["plain-launch", "pdl"])
def test_pdl_flag_reaches_kernel_and_launch_option(use_pdl):
    from det_suite.ops import gemm_launch_spec

    config = replace(shipped_policy("sm90").select(1, 4096, 4096), use_pdl=use_pdl)
    for use_tma in (False, True):
        gemm = gemm_launch_spec(config, 1, 4096, 4096, has_bias=False, use_tma=use_tma).calls[0]
        assert dict(gemm.constexprs)["USE_PDL"] is use_pdl
        assert dict(gemm.options)["launch_pdl"] is use_pdl


@pytest.mark.parametrize("prefetch_k", [0, 2048], ids=["off", "on"])
def test_prefetch_k_reaches_the_tma_kernels_only(prefetch_k):
    """The TMA kernels take PREFETCH_K and the weight's pointer beside its descriptor; the
    pointer kernel (which a tile falls back to) takes neither."""
    from det_suite.ops import gemm_launch_spec

    config = replace(shipped_policy("sm90").select(1, 4096, 4096), prefetch_k=prefetch_k)
    tma = gemm_launch_spec(config, 1, 4096, 4096, has_bias=False, use_tma=True).calls[0]
    pointer = gemm_launch_spec(config, 1, 4096, 4096, has_bias=False, use_tma=False).calls[0]
    assert dict(tma.constexprs)["PREFETCH_K"] == prefetch_k
    assert [name for name, _ in tma.args][-2:] == ["b_ptr", "stride_bn"]
    assert "PREFETCH_K" not in dict(pointer.constexprs)


def test_prefetch_tile_gives_the_plain_tiles_bits(device):
    """Prefetching moves the weight's traffic, never the arithmetic. Under the interpreter
    the ops drop it (no prefetch instruction there), so the CPU shows the op accepts such a
    tile; the GPU runs it, eager and in the PDL chain above."""
    problem, _, a = _stress_layer(64, 256, 3, device)
    config = replace(shipped_policy("sm90").select(1, 4096, 4096), block_k=SM90_BLOCK_K)
    outs = [_gemm(a, problem, replace(config, use_pdl=True, prefetch_k=pf)) for pf in (256, 0)]
    assert torch.equal(outs[0], outs[1])


PDL_FAMILIES = [pytest.param("sm90", marks=pytest.mark.sm90, id="sm90"),
                pytest.param("sm120", marks=pytest.mark.sm120, id="sm120")]
PDL_CHAIN_REPLAYS = 20


class PdlChain:
    """Kernels that each read or overwrite what the kernel before them wrote, launched back
    to back: quantize -> a slow GEMM -> a fast GEMM whose bias is the slow one's output row
    -> a large GEMM and a small one writing the same rows of one buffer -> quantize of the
    fast GEMM's output -> a GEMM of it. With PDL a GEMM may start while its predecessor
    runs; only its griddepcontrol.wait orders it, and a missing wait shows as a stale bias,
    a lost write or a stale input."""

    def __init__(self, family: str, use_pdl: bool, prefetch_k: int = 0):
        from det_suite.policy import shipped_policy as table

        self.policy = table(family)
        self.use_pdl = use_pdl
        self.prefetch_k = prefetch_k  # on every TMA GEMM of the chain: weight fetches before the wait
        self.slow, x_slow = stress_operands(4096, 12288, 8, device="cuda", seed=1)
        self.fast, x_fast = stress_operands(4096, 4096, 8, device="cuda", seed=2)
        self.big, x_big = stress_operands(4096, 4096, 2048, device="cuda", seed=3)
        self.inputs = (x_slow, x_fast, x_big)
        self.shared = torch.empty(2048, 4096, dtype=torch.bfloat16, device="cuda")
        self.outputs = {}

    def _gemm(self, a, layer, out, bias=None):
        from det_suite.ops import launch_fp8_gemm, validate_scale

        config = replace(self.policy.select(a.shape[0], layer.n, layer.k), use_pdl=self.use_pdl)
        if config.use_tma:
            config = replace(config, prefetch_k=self.prefetch_k)
        return launch_fp8_gemm(a, layer.weight.t(), validate_scale(layer.input_scale, "a"),
                               validate_scale(layer.weight_scale, "b"), bias, out, config)

    def run(self) -> dict:
        x_slow, x_fast, x_big = self.inputs
        q_slow = quantize_fp8(x_slow, self.slow.input_scale)
        q_fast = quantize_fp8(x_fast, self.fast.input_scale)
        q_big = quantize_fp8(x_big, self.big.input_scale)
        slow = self._gemm(q_slow, self.slow, torch.empty(8, 4096, dtype=torch.bfloat16,
                                                         device="cuda"))
        fast = self._gemm(q_fast, self.fast, torch.empty_like(slow), bias=slow[0])
        self._gemm(q_big, self.big, self.shared)
        self._gemm(q_fast, self.fast, self.shared[:8])
        q_next = quantize_fp8(fast, self.fast.input_scale)
        last = self._gemm(q_next, self.fast, torch.empty_like(slow))
        self.outputs = {"slow": slow, "fast(bias=slow)": fast, "shared": self.shared,
                        "after-quantize": last}
        return self.outputs

    def poison(self) -> None:
        for out in self.outputs.values():
            out.fill_(float("nan"))


def _stepwise_reference(family):
    """The chain with PDL off and a synchronize after every kernel."""
    chain = PdlChain(family, use_pdl=False)
    outs = chain.run()
    torch.cuda.synchronize()
    return {name: out.clone() for name, out in outs.items()}


@pytest.mark.gpu
@pytest.mark.graph
@pytest.mark.parametrize("family", PDL_FAMILIES)
@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("prefetch_k", [0, 1024], ids=["no-prefetch", "l2-prefetch"])
def test_gpu_pdl_chain_sees_what_each_previous_kernel_wrote(family, mode, prefetch_k,
                                                            bit_exact):
    """With prefetch_k the GEMMs also ask L2 for their weights before the wait: the same
    bits, in a chain where any early read would show."""
    if prefetch_k and family != "sm90":
        pytest.skip("prefetch_k is an SM90 tile field (a TMA + PDL tile)")
    expected = _stepwise_reference(family)
    chain = PdlChain(family, use_pdl=True, prefetch_k=prefetch_k)
    chain.run()  # compiles, allocates the split-K counters and validates the scales
    torch.cuda.synchronize()
    if mode == "graph":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = chain.run()
    wrong = []
    for replay in range(PDL_CHAIN_REPLAYS):
        chain.poison()  # a kernel that reads before its predecessor wrote sees NaN
        if mode == "graph":
            graph.replay()
        else:
            outs = chain.run()
        torch.cuda.synchronize()
        wrong += [f"{name} (replay {replay})" for name, out in outs.items()
                  if not bit_exact(out, expected[name])]
    print(f"{PDL_CHAIN_REPLAYS * len(expected)} bit-exact comparisons, {len(wrong)} differ")
    assert wrong == []


def test_pdl_tile_gives_the_plain_tiles_bits(device):
    """A PDL tile (SM90 decode) gives the plain tile's bits; under the CPU interpreter it
    runs without the launch attribute or the wait: it executes grids one after another and
    has no griddepcontrol, so the wait's place is checked in the PTX instead
    (test_ptx_grid_dependency.py) and the race on the GPU (the PDL chain test above)."""
    problem, _, a = _stress_layer(64, 256, 3, device)
    config = replace(shipped_policy("sm90").select(1, 4096, 4096), block_k=SM90_BLOCK_K)
    outs = [_gemm(a, problem, replace(config, use_pdl=pdl)) for pdl in (True, False)]
    assert torch.equal(outs[0], outs[1])
