"""What the invariance harness compares: shapes, row-count sets, the case matrix, inputs;
and the GEMM-level operands (`gemm_operands`) tile-table entries are proven on.

Inputs are built so that a change of reduction schedule shows in the output bits.
FP8 products are exact in fp32 and a sum of them rounds only when its terms span more than
24 bits, so with plain Gaussian activations two different summation orders usually give
the same fp32 total, and the rare one-ulp difference rarely survives the cast to BF16: a
harness fed such inputs would call almost anything invariant. Every row here therefore
carries `PAIRS` cancelling outlier pairs: channel i holds +A and channel j = -A (A at or
beyond the FP8 range), and weight columns i and j are equal and large. The pair's products
are exactly opposite, so they cancel in exact arithmetic, but between them the running fp32
sum is about 2**18 and every small product added meanwhile is rounded at that scale; the
final output is small, so those roundings reach the output bits. Channel i lies in the
first half of K and j in the second, so a split of K, a different BLOCK_K or a different
combine order all round a different set of terms. This is what lets the positive control
(a schedule chosen by M) be detected on shapes as small as K=80 on the CPU interpreter.
Massive-activation channels of this size are what FP8 calibration meets in real LLMs; the
cancellation is the deliberate part.
"""

from __future__ import annotations

import itertools
import math
import zlib
from dataclasses import dataclass

import torch

from det_suite.models.catalog import MODELS, projections

from det_suite.models.synthetic_linear import Fp8Linear

from det_suite.kernels.fp8_constants import FP8_E4M3_MAX

FP8_DTYPE = torch.float8_e4m3fn
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LAYOUTS = ("contiguous", "strided3d")
ACTIVATIONS = ("calibrated", "saturated")

# Static input scale: background activations quantize to values around 1, the pair
# outliers to 448 (the calibrated amax, as ModelOpt would set it: amax / 448 = 1).
INPUT_SCALE = 1.0
PAIRS = 4
# Pair weight columns are this many times the background's 1/sqrt(K) scale, so they set
# the weight scale (and quantize near 448) while background weights quantize around 2.
PAIR_WEIGHT_GAIN = 64.0
# Row padding of the strided 3D layout; filled with NaN so a kernel that reads past a
# row's K elements poisons its output instead of passing silently.
STRIDED_PAD = 16


@dataclass(frozen=True)
class Shape:
    name: str
    n: int
    k: int

    def __str__(self) -> str:
        return f"{self.name} ({self.n}x{self.k})"


def model_shapes(model: str) -> tuple[Shape, ...]:
    """A model's projections from the shape catalog, named '<model>.<projection>'."""
    return tuple(Shape(f"{p.model}.{p.name}", p.n, p.k) for p in projections(model))


QWEN3_8B = model_shapes("qwen3-8b")
QWEN3_14B = model_shapes("qwen3-14b")
# K=80 is not a multiple of any BLOCK_K (masked K tail); N=4000 is not a multiple of 64 or
# 128 (masked N tail); both stay multiples of 16, which cuBLASLt's FP8 path requires.
K80_TAIL = Shape("k80-tail", 4000, 80)
# Interpreter-sized: an N tail under BLOCK_N 64 with several K tiles, and a K=80 tail.
CPU_SHAPES = (Shape("cpu.n96k256", 96, 256), Shape("cpu.n64k80-tail", 64, 80))
SHAPE_PRESETS = {
    **{model: model_shapes(model) for model in MODELS},
    "k80-tail": (K80_TAIL,),
    "gpu": QWEN3_8B + QWEN3_14B + (K80_TAIL,),
    "cpu": CPU_SHAPES,
}


def parse_shapes(specs) -> tuple[Shape, ...]:
    """Preset names (see SHAPE_PRESETS) and 'N,K' / 'NxK' pairs, in order, deduplicated."""
    shapes: list[Shape] = []
    for spec in specs:
        spec = spec.strip()
        if spec in SHAPE_PRESETS:
            found = SHAPE_PRESETS[spec]
        else:
            parts = spec.replace("x", ",").split(",")
            if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"shape {spec!r} is neither a preset "
                                 f"({', '.join(SHAPE_PRESETS)}) nor 'N,K' with positive "
                                 "integers")
            n, k = (int(p) for p in parts)
            if n < 1 or k < 1:
                raise ValueError(f"shape {spec!r}: N and K must be >= 1")
            found = (Shape(f"{n}x{k}", n, k),)
        shapes.extend(s for s in found if s not in shapes)
    if not shapes:
        raise ValueError("no shapes given")
    return tuple(shapes)


# ---------------------------------------------------------------- row counts

def _table_m_bounds() -> set[int]:
    """Every BLOCK_M and M-class bound a shipped tile table uses: where M changes tiles."""
    from det_suite.policy import shipped_families, shipped_policy

    bounds = set()
    for family in shipped_families():
        for entry in shipped_policy(family).all_entries():
            for tile in entry.m_tiles:
                bounds.add(tile.block_m)
                if tile.max_m is not None:
                    bounds.add(tile.max_m)
    return bounds


# BLOCK_M values any Triton FP8 table plausibly uses, whether or not shipped today.
BLOCK_M_VALUES = (16, 32, 64, 128, 256)


def boundary_ms(max_m: int) -> tuple[int, ...]:
    """m values around every BLOCK_M / table bound and every power of two up to max_m:
    b - 1, b and b + 1, so each side of each tile change is exercised; plus max_m."""
    if max_m < 1:
        raise ValueError(f"max_m must be >= 1; got {max_m}")
    centres = set(BLOCK_M_VALUES) | _table_m_bounds()
    centres |= {1 << e for e in range(max_m.bit_length())}
    ms = {m for c in centres for m in (c - 1, c, c + 1)}
    ms.add(max_m)
    return tuple(sorted(m for m in ms if 1 <= m <= max_m))


# Reporting classes of M: edges at the BLOCK_M values tables switch on, then decode-sized
# versus prefill-sized batches.
M_CLASS_EDGES = (16, 32, 64, 128, 1024)


def m_class(m: int) -> str:
    low = 1
    for edge in M_CLASS_EDGES:
        if m <= edge:
            return f"{low}-{edge}"
        low = edge + 1
    return f">{M_CLASS_EDGES[-1]}"


def m_classes() -> tuple[str, ...]:
    return tuple(m_class(e) for e in M_CLASS_EDGES) + (f">{M_CLASS_EDGES[-1]}",)


# ---------------------------------------------------------------- the matrix

@dataclass(frozen=True)
class Case:
    shape: Shape
    dtype: str         # "bf16" | "fp16"
    bias: bool
    layout: str        # "contiguous" | "strided3d"
    seed: int
    activation: str    # "calibrated" | "saturated"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} not in {tuple(DTYPES)}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r} not in {LAYOUTS}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} not in {ACTIVATIONS}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def id(self) -> str:
        return "/".join((self.shape.name, self.dtype, "bias" if self.bias else "no-bias",
                         self.layout, f"seed{self.seed}", self.activation))

    def as_dict(self) -> dict:
        return {"id": self.id, "shape": self.shape.name, "n": self.shape.n, "k": self.shape.k,
                "dtype": self.dtype, "bias": self.bias, "layout": self.layout,
                "seed": self.seed, "activation": self.activation}


# For each (shape, dtype, seed index, bias), the layout and activation: over the four
# (seed index, bias) cells every (layout, activation) pair appears once, and so does every
# (bias, layout) and (bias, activation) pair: a balanced half of the full cross product.
_BALANCED = {(0, False): ("contiguous", "calibrated"), (0, True): ("strided3d", "saturated"),
             (1, False): ("strided3d", "calibrated"), (1, True): ("contiguous", "saturated")}


def full_matrix(shapes, dtypes=("bf16", "fp16"), seeds=(0, 1)) -> tuple[Case, ...]:
    """Every shape x dtype x seed x bias, with layout and activation balanced over them."""
    cases = []
    for shape, dtype, (index, seed), bias in itertools.product(
            shapes, dtypes, enumerate(seeds), (False, True)):
        layout, activation = _BALANCED[(index % 2, bias)]
        cases.append(Case(shape, dtype, bias, layout, seed, activation))
    return tuple(cases)


def quick_matrix(shapes, dtypes=("bf16", "fp16"), seeds=(0, 1)) -> tuple[Case, ...]:
    """Two complementary cases per shape: every axis value meets every shape once."""
    cases = []
    for shape in shapes:
        cases.append(Case(shape, dtypes[0], False, "contiguous", seeds[0], "calibrated"))
        cases.append(Case(shape, dtypes[-1], True, "strided3d", seeds[-1], "saturated"))
    return tuple(dict.fromkeys(cases))


def graph_matrix(shapes, dtypes=("bf16", "fp16"), seeds=(0, 1)) -> tuple[Case, ...]:
    """CUDA Graph cases, as the seed's: bias and strided 3D input, BF16 and FP16."""
    cases = []
    for shape in shapes:
        cases.append(Case(shape, dtypes[0], True, "contiguous", seeds[0], "calibrated"))
        cases.append(Case(shape, dtypes[-1], False, "strided3d", seeds[0], "saturated"))
    return tuple(dict.fromkeys(cases))


# ---------------------------------------------------------------- plans

DECODE_GRAPH_SIZES = (1, 2, 4)
PREFILL_GRAPH_SIZES = (4, 128, 256, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class Plan:
    """Row counts one case is compared at."""

    m_full: int                       # rows of the reference call the suffixes come from
    suffix_ms: tuple[int, ...]        # cached-suffix lengths
    placements: tuple[int, ...]       # batch sizes the target rows are placed in
    target_rows: int = 3              # rows whose neighbours change
    graph_sizes: tuple[int, ...] = ()  # padded CUDA Graph batch sizes
    graph_replays: int = 2            # fresh inputs per captured graph

    def __post_init__(self) -> None:
        bad = [m for m in self.suffix_ms if not 1 <= m <= self.m_full]
        if bad:
            raise ValueError(f"suffix lengths {bad} are outside 1..m_full={self.m_full}")
        if any(p < self.target_rows for p in self.placements):
            raise ValueError(f"every placement must hold the {self.target_rows} target rows")

    def as_dict(self) -> dict:
        return {"m_full": self.m_full, "suffix_ms": list(self.suffix_ms),
                "placements": list(self.placements), "target_rows": self.target_rows,
                "graph_sizes": list(self.graph_sizes), "graph_replays": self.graph_replays}


def quick_plan(m_full: int = 130, suffix_ms=None, graph: bool = False) -> Plan:
    """CPU-sized: every tile boundary up to 129 rows (BLOCK_M 128 + 1)."""
    return Plan(m_full=m_full, suffix_ms=tuple(suffix_ms or boundary_ms(m_full)),
                placements=tuple(p for p in (17, 33, 130) if p <= m_full) or (m_full,),
                graph_sizes=(1, 2, 4, 128) if graph else ())


def full_plan(m_full: int = 8192, suffix_ms=None, graph: bool = True) -> Plan:
    """GPU: boundaries up to 8192 rows and the seed's CUDA Graph batch sizes."""
    sizes = tuple(sorted(set(DECODE_GRAPH_SIZES) | set(PREFILL_GRAPH_SIZES)))
    return Plan(m_full=m_full, suffix_ms=tuple(suffix_ms or boundary_ms(m_full)),
                placements=tuple(p for p in (17, 33, 65, 129, 1025, 4097, 8192)
                                 if p <= m_full) or (m_full,),
                graph_sizes=tuple(s for s in sizes if s <= m_full) if graph else ())


# ---------------------------------------------------------------- inputs

def _stable_seed(*parts) -> int:
    # Python's hash() of a str changes per process; crc32 does not.
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def _generator(device, *parts) -> torch.Generator:
    return torch.Generator(device=torch.device(device)).manual_seed(_stable_seed(*parts))


@dataclass(frozen=True)
class Problem(Fp8Linear):
    """One FP8 linear layer of a case (what every provider is called with besides x) and
    the cancelling channel pairs its activations are built around."""

    first: torch.Tensor            # pair channels in the first half of K (on the device)
    second: torch.Tensor           # their partners in the second half


def pair_channels(k: int, seed: int, pairs: int = PAIRS) -> tuple[list[int], list[int]]:
    """`pairs` channels in [0, K/2) and as many partners in [K/2, K) (fewer when K is
    tiny)."""
    gen = torch.Generator().manual_seed(_stable_seed("pairs", k, seed))
    half = k // 2
    count = min(pairs, half, k - half)
    first = torch.randperm(half, generator=gen)[:count].tolist()
    second = (half + torch.randperm(k - half, generator=gen)[:count]).tolist()
    return first, second


def make_problem(case: Case, device) -> Problem:
    """Weight [N, K] scaled like a trained layer's (std 1/sqrt(K)) with equal, large pair
    columns; weight scale = amax / 448; bias optional. Depends on (shape, seed) only, plus
    the dtype for the bias."""
    n, k = case.shape.n, case.shape.k
    first, second = pair_channels(k, case.seed)
    gen = _generator(device, "weight", n, k, case.seed)
    w = torch.randn(n, k, generator=gen, device=device) / math.sqrt(k)
    big = torch.randn(n, len(first), generator=gen, device=device) * (PAIR_WEIGHT_GAIN
                                                                      / math.sqrt(k))
    w[:, first] = big
    w[:, second] = big
    weight_scale = (w.abs().amax() / FP8_E4M3_MAX).reshape(1).float()
    weight = (w / weight_scale).to(FP8_DTYPE)  # |w / scale| <= 448: no saturation
    bias = _bias(n, k, case.seed, case.torch_dtype, device) if case.bias else None
    input_scale = torch.full((1,), INPUT_SCALE, dtype=torch.float32, device=device)
    return _problem(weight, weight_scale, input_scale, bias, first, second, device)


def _bias(n: int, k: int, seed: int, dtype: torch.dtype, device) -> torch.Tensor:
    gen = _generator(device, "bias", n, k, seed)
    return (torch.randn(n, generator=gen, device=device) * 0.5).to(dtype)


def _problem(weight, weight_scale, input_scale, bias, first, second, device) -> Problem:
    index = torch.tensor(first, dtype=torch.long, device=device)
    partner = torch.tensor(second, dtype=torch.long, device=device)
    return Problem(weight, weight_scale, input_scale, bias, index, partner)


def make_rows(problem: Problem, case: Case, rows: int, stream: str, device) -> torch.Tensor:
    """(rows, K) contiguous activations in the case dtype; `stream` names an independent
    draw (the reference batch, each set of neighbours, each graph replay, ...).

    calibrated: background N(0, 1) (quantizes to about +-1..4), pairs +-A with A in
    [112, 448] * input_scale and one pair exactly at 448 (the calibrated amax).
    saturated: pairs at 1..8 x the FP8 range (they clamp to exactly +-448, still cancelling)
    and 1/32 of the background beyond the range (clamped, uncancelled).
    """
    k = problem.k
    gen = _generator(device, "rows", case.id, stream, rows)
    x = torch.randn(rows, k, generator=gen, device=device)
    pairs = problem.first.numel()
    u = torch.rand(rows, pairs, generator=gen, device=device)
    limit = FP8_E4M3_MAX * INPUT_SCALE
    if case.activation == "calibrated":
        amp = limit * (0.25 + 0.75 * u)
        if pairs:
            amp[:, 0] = limit
    else:
        amp = limit * (1.0 + 7.0 * u)
        beyond = torch.rand(rows, k, generator=gen, device=device) < 1.0 / 32.0
        spread = 1.0 + 3.0 * torch.rand(rows, k, generator=gen, device=device)
        x = torch.where(beyond, torch.sign(x) * limit * spread, x)
    if pairs:
        x[:, problem.first] = amp
        x[:, problem.second] = -amp
    return x.to(case.torch_dtype)


# Two magnitude profiles of one construction (`pair_channels`, x[:, first] = -x[:, second],
# equal weight columns). layer: the harness's, scaled like a calibrated layer. sharp: both
# operands' background small, pair weights at the FP8 range, SHARP_PAIRS pairs: the running
# sum dwarfs every background product, so each regrouping rounds anew (on the layer profile
# a background product is often exact at the sum's ulp: on a 64x512 interpreter probe
# split_k 1 vs 2 differed in 2-3 of 20 rows for seeds 0 and 1; sharp, in all 20 rows for
# each of seeds 0..11, K = 80 to 768). What `det-suite tune` proves entries on.
STRESS_PROFILES = ("layer", "sharp")
SHARP_PAIRS = 16


def _small_dense(shape, gen: torch.Generator, device) -> torch.Tensor:
    """Magnitudes uniform in [2**-5, 2**-3], random signs (never zero in FP8)."""
    mag = (torch.rand(shape, generator=gen, device=device) * 0.75 + 0.25) * 2.0 ** -3
    return mag * (torch.randint(0, 2, shape, generator=gen, device=device) * 2 - 1)


def sharp_problem(n: int, k: int, *, seed: int, device, bias_dtype: torch.dtype | None = None
                  ) -> Problem:
    """The sharp profile's layer: small dense weights, pair columns +-448 (a random sign per
    column and pair), unit scales."""
    first, second = pair_channels(k, seed, SHARP_PAIRS)
    gen = _generator(device, "sharp-weight", n, k, seed)
    w = _small_dense((n, k), gen, device)
    sign = torch.randint(0, 2, (n, len(first)), generator=gen, device=device) * 2 - 1
    w[:, first] = sign * FP8_E4M3_MAX
    w[:, second] = sign * FP8_E4M3_MAX
    one = torch.ones(1, dtype=torch.float32, device=device)
    bias = _bias(n, k, seed, bias_dtype, device) if bias_dtype is not None else None
    return _problem(w.to(FP8_DTYPE), one, one.clone(), bias, first, second, device)


def sharp_rows(problem: Problem, rows: int, *, seed: int, stream: str, device,
               dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """(rows, K) sharp-profile activations: small dense, pairs +-A with A in [64, 448]."""
    gen = _generator(device, "sharp-rows", problem.n, problem.k, seed, stream, rows)
    x = _small_dense((rows, problem.k), gen, device)
    amp = torch.rand((rows, problem.first.numel()), generator=gen, device=device) * 384 + 64
    x[:, problem.first] = amp
    x[:, problem.second] = -amp
    return x.to(dtype)


def stress_operands(n: int, k: int, rows: int, *, device, dtype: str = "bf16",
                    bias: bool = False, seed: int = 0, activation: str = "calibrated",
                    stream: str = "x", profile: str = "layer") -> tuple[Problem, torch.Tensor]:
    """A layer and (rows, K) activations on which a change of reduction schedule (chunking,
    BLOCK_K, tile or chunk order, combine order) changes output bits: the cancelling pairs
    (module docstring) in one of STRESS_PROFILES (`activation` is the layer profile's),
    for kernel-level tests and checks outside the harness."""
    if profile == "sharp":
        problem = sharp_problem(n, k, seed=seed, device=device,
                                bias_dtype=DTYPES[dtype] if bias else None)
        return problem, sharp_rows(problem, rows, seed=seed, stream=stream, device=device,
                                   dtype=DTYPES[dtype])
    if profile != "layer":
        raise ValueError(f"profile {profile!r} not in {STRESS_PROFILES}")
    case = Case(Shape(f"{n}x{k}", n, k), dtype, bias, "contiguous", seed, activation)
    problem = make_problem(case, device)
    return problem, make_rows(problem, case, rows, stream, device)


# ---------------------------------------------------------------- GEMM operands

# Operand sets of a GEMM-level check (`compare.prove_entry`): dense random FP8, what a real
# layer sees (alone it misses most regroupings in BF16 output: on the probe above it never
# told split_k 1 from 2), then the sharp stress data quantized to FP8.
OPERAND_DATA = ("dense", "stress")


@dataclass(frozen=True)
class GemmOperands:
    """FP8 operands of one (rows x K) @ (K x N) GEMM and the data set they come from."""

    a: torch.Tensor               # (rows, K) float8_e4m3fn
    weight: torch.Tensor          # [N, K] float8_e4m3fn
    a_scale: torch.Tensor         # one-element float32
    weight_scale: torch.Tensor    # one-element float32
    data: str                     # "stress" | "dense" | "given"
    label: str = ""               # what they were drawn for (a case id)

    rows = property(lambda self: self.a.shape[0])
    n = property(lambda self: self.weight.shape[0])
    k = property(lambda self: self.weight.shape[1])


def dense_operands(n: int, k: int, rows: int, *, device,
                   seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(a (rows, K), w [N, K]) dense random FP8, no zeros: the benchmark's `random_fp8`,
    a then w from one generator seeded `seed`."""
    from det_suite.bench.gemm import random_fp8

    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return (random_fp8((rows, k), generator=gen, device=device),
            random_fp8((n, k), generator=gen, device=device))


def gemm_operands(n: int, k: int, rows: int, *, data: str = "stress", device,
                  seed: int = 0) -> GemmOperands:
    """The operands of an `OPERAND_DATA` set. stress: `stress_operands`' sharp profile, the
    activations quantized (plain torch); dense: `dense_operands` (seed + 29), unit scales."""
    if data == "stress":
        problem, x = stress_operands(n, k, rows, device=device, seed=seed, profile="sharp")
        a = (x.float() / problem.input_scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
        return GemmOperands(a.to(FP8_DTYPE), problem.weight,
                            problem.input_scale, problem.weight_scale, "stress",
                            f"{n}x{k}/stress/seed{seed}")
    if data == "dense":
        a, w = dense_operands(n, k, rows, device=device, seed=seed + 29)
        one = torch.ones(1, dtype=torch.float32, device=device)
        return GemmOperands(a, w, one, one, "dense", f"{n}x{k}/dense/seed{seed}")
    raise ValueError(f"data must be one of {OPERAND_DATA}; got {data!r}")


# ---------------------------------------------------------------- layouts

def apply_layout(x2d: torch.Tensor, layout: str) -> torch.Tensor:
    """contiguous: (rows, K) as is. strided3d: a (1, rows, K) view whose rows are
    K + STRIDED_PAD apart, the pad holding NaN."""
    if layout == "contiguous":
        return x2d.contiguous()
    if layout != "strided3d":
        raise ValueError(f"layout {layout!r} not in {LAYOUTS}")
    rows, k = x2d.shape
    base = torch.full((1, rows, k + STRIDED_PAD), float("nan"), dtype=x2d.dtype,
                      device=x2d.device)
    base[0, :, :k] = x2d
    return base[..., :k]


def take_rows(t: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows start..stop of a (rows, C) or (1, rows, C) tensor, keeping its layout."""
    return t[..., start:stop, :]


def row_count(t: torch.Tensor) -> int:
    return t.shape[-2]
