"""Every launch shape of the FP8 GEMM computes the reduction schedule it declares, bit for bit.

On the CPU the interpreter's tl.dot is an ordered fp32 sum (det_suite.platform.gpu_faithful_interpreter), so the
kernel must equal `invariance.schedule.emulate_fp8_gemm` for its config: chunks, BLOCK_K
tiles, the order partials are combined, the K and N tails, the epilogue. Inputs are the
harness's cancelling pairs, and the counterpart tests below prove that on those inputs each
deliberate reordering of the schedule changes the bits, so the equality cannot pass blind.
On a GPU the MMA sums each K step in its own order: there the same launch shapes are
compared with each other (test_fp8_linear.py) and across M (the invariance harness).
"""

from dataclasses import replace

import pytest
import torch

from det_suite.invariance.cases import stress_operands
from det_suite.invariance.schedule import Schedule, emulate_fp8_gemm
from det_suite.ops import fp8_scaled_mm, quantize_fp8
from det_suite.policy import LaunchConfig

OUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# (id, kernel, split_k, use_workspace, fused_fixup). BLOCK_K 32 makes K=512 16 tiles (three
# chunks of 6, 6, 4) and K=80 three tiles with a masked tail; split 4 on K=80 leaves the
# last chunk empty.
LAUNCH_SHAPES = [
    ("pointer-unsplit", "pointer", 1, False, True),
    ("pointer-split3-single-pass", "pointer", 3, False, True),
    ("pointer-split3-fused-fixup", "pointer", 3, True, True),
    ("pointer-split3-reduce-kernel", "pointer", 3, True, False),
    ("pointer-split4-fused-fixup", "pointer", 4, True, True),
    ("tma-unsplit", "tma", 1, False, True),
    ("tma-split3-single-pass", "tma", 3, False, True),
    ("tma-split3-fused-fixup", "tma", 3, True, True),
    ("tma-split3-reduce-kernel", "tma", 3, True, False),
    ("swapped-unsplit", "swapped", 1, False, True),
    ("swapped-split3-single-pass", "swapped", 3, False, True),
    ("swapped-split3-fused-fixup", "swapped", 3, True, True),
    ("swapped-split4-reduce-kernel", "swapped", 4, True, False),
]
PROBLEMS = [pytest.param(96, 512, id="n96-k512-ntail"), pytest.param(64, 80, id="n64-k80-ktail")]
EPILOGUES = [pytest.param("bf16", True, id="bf16-bias"), pytest.param("fp16", False, id="fp16")]
BLOCK_K = 32

pytestmark = pytest.mark.usefixtures("interpreter_only")


@pytest.fixture
def interpreter_only(device):
    if device != "cpu":
        pytest.skip("the schedule model is the interpreter's ordered tl.dot; a GPU's MMA sums "
                    "a K step in its own order (GPU launch shapes are compared with each other "
                    "in test_fp8_linear.py)")


def launch_config(kernel: str, split_k: int, use_workspace: bool, fused_fixup: bool
                  ) -> LaunchConfig:
    swapped = kernel == "swapped"
    return LaunchConfig(block_m=16 if swapped else 64, block_n=64, block_k=BLOCK_K,
                        num_warps=4, num_stages=2, split_k=split_k, group_m=8,
                        use_workspace=use_workspace, use_tma=kernel != "pointer",
                        fused_fixup=fused_fixup, swap_ab=swapped)


def operands(n, k, m, dtype, bias):
    problem, x = stress_operands(n, k, m, device="cpu", dtype=dtype, bias=bias)
    return problem, quantize_fp8(x, problem.input_scale)


def differing_rows(y: torch.Tensor, expected: torch.Tensor) -> int:
    """Rows whose bytes differ anywhere (a bit comparison: -0.0 vs 0.0 and NaN payloads
    count)."""
    assert y.shape == expected.shape and y.dtype == expected.dtype
    as_bits = torch.int16 if y.element_size() == 2 else torch.int32
    return int((y.view(as_bits) != expected.view(as_bits)).any(dim=1).sum())


def run_kernel(problem, a, config, out_dtype):
    return fp8_scaled_mm(a, problem.weight, problem.input_scale, problem.weight_scale,
                         problem.bias, out_dtype=out_dtype, config=config)


def emulate(problem, a, schedule, out_dtype):
    return emulate_fp8_gemm(a, problem.weight, problem.input_scale, problem.weight_scale,
                            problem.bias, schedule, out_dtype=out_dtype)


@pytest.mark.parametrize("dtype,bias", EPILOGUES)
@pytest.mark.parametrize("m", [1, 20], ids=["m1", "m20"])
@pytest.mark.parametrize("n,k", PROBLEMS)
@pytest.mark.parametrize("launch", LAUNCH_SHAPES, ids=[shape[0] for shape in LAUNCH_SHAPES])
def test_launch_shape_computes_its_declared_schedule(launch, n, k, m, dtype, bias):
    _, kernel, split_k, use_workspace, fused = launch
    problem, a = operands(n, k, m, dtype, bias)
    config = launch_config(kernel, split_k, use_workspace, fused)
    y = run_kernel(problem, a, config, OUT_DTYPES[dtype])
    expected = emulate(problem, a, Schedule.of(config, k), OUT_DTYPES[dtype])
    bad = differing_rows(y, expected)
    print(f"{m} rows x {n} compared bit for bit with {Schedule.of(config, k).describe()}: "
          f"{bad} differ")
    assert bad == 0


def perturbations(schedule: Schedule, k: int) -> dict[str, Schedule]:
    """Deliberate reorderings of `schedule` that change its arithmetic for this K. One that
    is the same sum is left out (reversing two chunks: 0 + a + b == 0 + b + a; a split whose
    last chunk is one tile: (t0 + t1) + t2 either way): no input can tell those apart."""
    candidates = {
        "block_k-halved": schedule.with_block_k(schedule.block_k // 2, k),
        "block_k-doubled": schedule.with_block_k(schedule.block_k * 2, k),
        "one-more-split": schedule.with_split_k(schedule.split_k + 1, k),
        "one-split-less": schedule.with_split_k(max(schedule.split_k - 1, 1), k),
        "chunks-reversed": replace(schedule, reverse_chunks=True),
        "tiles-reversed": replace(schedule, reverse_tiles=True),
    }
    declared = schedule.expression(k)
    return {name: s for name, s in candidates.items() if s.expression(k) != declared}


SCHEDULES = [pytest.param(1, id="unsplit"), pytest.param(3, id="split3"),
             pytest.param(4, id="split4")]


def test_equal_expressions_are_equal_bits_and_only_those():
    """The canonical expression is what decides which reorderings a test must see: two
    schedules with the same expression give the same bits (here a 2-way split of three
    tiles and no split), different ones do not."""
    problem, a = operands(64, 80, 20, "bf16", True)
    unsplit = Schedule(block_k=32, k_chunk=96, split_k=1)
    same = unsplit.with_split_k(2, 80)
    different = unsplit.with_block_k(16, 80)
    assert same.expression(80) == unsplit.expression(80)
    assert different.expression(80) != unsplit.expression(80)
    base = emulate(problem, a, unsplit, torch.bfloat16)
    assert differing_rows(emulate(problem, a, same, torch.bfloat16), base) == 0
    assert differing_rows(emulate(problem, a, different, torch.bfloat16), base) > 0


@pytest.mark.parametrize("split_k", SCHEDULES)
@pytest.mark.parametrize("n,k", PROBLEMS)
def test_stress_inputs_see_every_reordering_of_the_schedule(n, k, split_k):
    """Counterpart of the test above: on its inputs, every reordering differs from the
    declared schedule, so a kernel that reordered would be flagged by the same comparison."""
    problem, a = operands(n, k, 20, "bf16", True)
    declared = Schedule.of(launch_config("pointer", split_k, False, True), k)
    expected = emulate(problem, a, declared, torch.bfloat16)
    changed = perturbations(declared, k)
    assert len(changed) >= 3, f"too few distinct reorderings of {declared.describe()}"
    blind = []
    for name, schedule in changed.items():
        rows = differing_rows(emulate(problem, a, schedule, torch.bfloat16), expected)
        print(f"{name} ({schedule.describe()}): {rows} of 20 rows differ")
        if rows == 0:
            blind.append(name)
    assert blind == [], f"inputs blind to {blind} against {declared.describe()}"


@pytest.mark.parametrize("kernel", ["pointer", "tma", "swapped"])
def test_kernel_run_with_another_split_is_flagged(kernel):
    """The kernel-versus-model comparison itself fails when the kernel's schedule is not the
    one it is compared with: a 3-way split checked against the 4-way split's model."""
    problem, a = operands(96, 512, 20, "bf16", True)
    ran = launch_config(kernel, 3, True, True)
    declared = Schedule.of(replace(ran, split_k=4), 512)
    y = run_kernel(problem, a, ran, torch.bfloat16)
    assert differing_rows(y, emulate(problem, a, declared, torch.bfloat16)) > 0


def test_bf16_output_is_rounded_to_nearest_even_like_the_gpu():
    """Triton's interpreter truncates fp32 -> bf16; under det-suite's plugin it rounds to
    nearest even, as a GPU's epilogue does. Truncation would differ on these inputs."""
    problem, a = operands(64, 80, 20, "bf16", False)
    config = launch_config("pointer", 1, False, True)
    y = run_kernel(problem, a, config, torch.bfloat16)
    fp32 = emulate(problem, a, Schedule.of(config, 80), torch.float32)
    truncated = (fp32.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)
    assert differing_rows(y, fp32.to(torch.bfloat16)) == 0
    assert differing_rows(truncated, fp32.to(torch.bfloat16)) > 0
