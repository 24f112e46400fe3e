"""CUDA Graph replay on a GPU, one test id per (family, shape, capture size, real rows)
case, with its positive control, and the per-family fact about the seed's table.

A graph captured at B rows and replayed with m real rows (the rest padding) must give the
m-row eager call's bits: the padded batch a CUDA Graph replays is one of the row subsets
the invariance rule covers. The whole matrix (every shape, dtype, seed, layout, row count,
provider) is the harness's job (`det-suite invariance --full`, run by `det-suite
gpu-suite`); these cases name what fails.
"""

import functools

import pytest
import torch

from det_suite.invariance import cases as C
from det_suite.invariance import providers as prov
from det_suite.invariance import runner
from det_suite.invariance.graph import WARMUP_CALLS, CompileWatch, padded_row_counts
from det_suite.ops import fp8_linear
from det_suite.pytest_plugin.families import family_cases

DEVICE = "cuda"
GPU_SHAPES = C.SHAPE_PRESETS["gpu"]
# Decode batches and two prefill sizes; each is replayed full and with the fewest rows a
# batch padded up to it holds (invariance.graph.padded_row_counts).
GRAPH_SIZES = (1, 2, 4, 128, 1024)
GRAPH_CASES = [(f"{shape.name}-B{size}-m{m}", (shape, size, m))
               for shape in GPU_SHAPES for size, ms in padded_row_counts(GRAPH_SIZES)
               for m in ms]


def _family_linear(family):
    # The table as served on this GPU: unnamed shapes (the K=80 tail) on the generic rule.
    policy = prov.served_policy(family, DEVICE)

    def linear(x, weight, weight_scale, input_scale, bias):
        return fp8_linear(x, weight, weight_scale, input_scale, bias, policy=policy)
    return linear


def _rows(shape, rows, stream):
    return C.stress_operands(shape.n, shape.k, rows, device=DEVICE, bias=True, stream=stream)


class CapturedLinear:
    """`linear` captured in a CUDA graph at `size` rows of one stress layer."""

    def __init__(self, linear, shape, size):
        self.linear, self.shape, self.size = linear, shape, size
        self.problem, self.static_x = _rows(shape, size, f"graph{size}-warmup")
        args = self.problem.args()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up off the capture stream, as torch recommends
            for _ in range(WARMUP_CALLS):
                linear(self.static_x, *args)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with CompileWatch() as watch:
            with torch.cuda.graph(self.graph):
                self.static_y = linear(self.static_x, *args)
        assert not watch.compiled, f"capture compiled {watch.compiled}: warm-up missed one"

    def replay_and_eager(self, m):
        """(first m rows of a replay with m real rows and padding, the m-row eager call)."""
        fresh = _rows(self.shape, m, f"graph{self.size}-replay-m{m}")[1]
        if m < self.size:
            padding = _rows(self.shape, self.size - m, f"graph{self.size}-pad-m{m}")[1]
            self.static_x.copy_(torch.cat((fresh, padding)))
        else:
            self.static_x.copy_(fresh)
        self.graph.replay()
        eager = self.linear(fresh, *self.problem.args())
        torch.cuda.synchronize()
        return self.static_y[:m], eager


@functools.lru_cache(maxsize=1)
def _captured(family, shape, size):
    """One capture serves the consecutive cases of a (family, shape, size)."""
    return CapturedLinear(_family_linear(family), shape, size)


@pytest.mark.gpu
@pytest.mark.parametrize("family, shape, size, m", family_cases(GRAPH_CASES,
                                                                marks=[pytest.mark.graph]))
def test_graph_replay_matches_eager(family, shape, size, m, bit_exact):
    replayed, eager = _captured(family, shape, size).replay_and_eager(m)
    assert bit_exact(replayed, eager)


CONTROL_REPLAY_M = (5, 17, 31)


@pytest.mark.gpu
@pytest.mark.parametrize("family", family_cases([("qwen3-8b.o-B128", ())],
                                                marks=[pytest.mark.graph]))
def test_graph_replay_comparison_flags_the_positive_control(family, bit_exact):
    """Counterpart of the replay cases: the control picks its schedule by M, so a replay
    captured at 128 rows (BLOCK_K 64) differs from eager calls of up to 32 rows."""
    shape = next(s for s in GPU_SHAPES if s.name == "qwen3-8b.o")
    captured = CapturedLinear(prov.control_provider(DEVICE), shape, 128)
    same = [m for m in CONTROL_REPLAY_M if bit_exact(*captured.replay_and_eager(m))]
    assert same != list(CONTROL_REPLAY_M), "the control's M-dependence went unseen"


@pytest.mark.gpu
@pytest.mark.sm90
def test_seed_table_is_not_invariant_on_sm90():
    """docs/invariance-rule.md: on SM90 BLOCK_M 16/32 compile to mma.sync k16 on
    FP16-converted operands and 64/128 to wgmma k32, so the seed's table differs between
    small and large M."""
    providers = prov.resolve(["det_suite:sm120"], DEVICE).providers
    result = runner.run(providers, C.quick_matrix(C.QWEN3_8B),
                        C.full_plan(m_full=4097, graph=False), DEVICE, progress=None)
    differing = [c for c in result.recorder.mismatches() if c.kind == "suffix"]
    assert differing and min(c.m for c in differing) <= 32
