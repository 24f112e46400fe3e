"""det-suite's FP8 GEMM reduction schedule written out as plain fp32 torch arithmetic.

`emulate_fp8_gemm` computes out = cast((sum_k a[m, k] * b[n, k]) * (a_scale * b_scale) + bias)
in the order the kernels promise (fp8_scaled_mm.py's docstring): K split into `split_k`
chunks of `k_chunk` elements, BLOCK_K tiles visited in ascending order inside a chunk, each
tile's products summed from zero in ascending k and added to the chunk's accumulator,
chunks added to a zero-initialised total in ascending order, then scale, bias, cast - each
a separate fp32 rounding.

On Triton's interpreter, made GPU-faithful by `det_suite.platform.gpu_faithful_interpreter`
(the interpreter switch, `platform.interpreter`, installs it in every process that runs the
interpreter: library, CLI and pytest alike), a tile's `tl.dot` is exactly that ordered fp32
sum, so every launch shape of the kernel (pointer, TMA, swapped operands; single pass,
workspace with the fused fix-up or the reduce kernel) must equal this function bit for bit.
A kernel that walks tiles, chunks or partials in any other order, masks a tail wrongly, or
rounds its epilogue differently does not, on inputs built to expose reordering
(`invariance.cases`' cancelling pairs). On a GPU the MMA unit sums a K step in its own order,
so there the schedule is proved by invariance (kernel against kernel), never against this
model.

FP32 promotion (`LaunchConfig.promote_k`, policy/tiles.py's FAMILY_PROMOTE_K: every 128
elements of K on SM90) is not modelled, and need not be: the interpreter ignores
`max_num_imprecise_acc` (its tl.dot accumulates in fp32, with nothing to promote), so a
tile is one ordered sum whatever its promote_k. On SM90 the interval divides BLOCK_K, so
the promotion points fall inside tiles, at K offsets fixed by the family, never by M: they
change how the MMA sums a tile, not the order tiles and chunks are combined, which is what
this model states. At BLOCK_K 128 a tile is exactly one promotion group, summed from zero
and added to the accumulator, the structure modelled here.

`Schedule` also describes deliberate perturbations (reversed chunk or tile order, a different
BLOCK_K or split count) so a test can show that its inputs see every such change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from det_suite.policy import LaunchConfig


@dataclass(frozen=True)
class Schedule:
    """The order of one GEMM's fp32 reduction over K."""

    block_k: int
    k_chunk: int
    split_k: int
    reverse_chunks: bool = False  # perturbation: combine chunks last to first
    reverse_tiles: bool = False   # perturbation: visit a chunk's BLOCK_K tiles last to first

    def __post_init__(self) -> None:
        for name in ("block_k", "k_chunk", "split_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"Schedule.{name} must be >= 1; got {getattr(self, name)}")

    @classmethod
    def of(cls, config: LaunchConfig, k: int) -> "Schedule":
        """The schedule a launch config promises for a K (what every launch shape computes).
        `config.promote_k` is left out: it acts inside a tile (see the module docstring)."""
        return cls(block_k=config.block_k, k_chunk=config.k_chunk(k), split_k=config.split_k)

    def with_block_k(self, block_k: int, k: int) -> "Schedule":
        """The same split count with another BLOCK_K (chunks re-derived as LaunchConfig does)."""
        tiles = -(-k // block_k)
        return replace(self, block_k=block_k, k_chunk=-(-tiles // self.split_k) * block_k)

    def with_split_k(self, split_k: int, k: int) -> "Schedule":
        tiles = -(-k // self.block_k)
        return replace(self, split_k=split_k, k_chunk=-(-tiles // split_k) * self.block_k)

    def expression(self, k: int):
        """The sum as a tree of fp32 additions over BLOCK_K tile sums, canonical up to
        the two exact identities (0 + x == x, x + y == y + x): two schedules with equal
        expressions compute the same bits for every input, and unequal ones generally do
        not. A tile leaf is (lo, hi), the K range its tl.dot sums."""
        def add(left, right):
            return ("+",) + tuple(sorted((left, right), key=repr))

        chunks = []
        for s in range(self.split_k):
            begin, end = s * self.k_chunk, min((s + 1) * self.k_chunk, k)
            starts = list(range(begin, end, self.block_k))
            if self.reverse_tiles:
                starts.reverse()
            expr = None
            for k0 in starts:
                tile = (k0, min(k0 + self.block_k, end))
                expr = tile if expr is None else add(tile, expr)
            chunks.append(expr)
        if self.reverse_chunks:
            chunks.reverse()
        total = None
        for chunk in chunks:
            if chunk is not None:
                total = chunk if total is None else add(total, chunk)
        return total

    def describe(self) -> str:
        text = f"BLOCK_K {self.block_k}, {self.split_k} chunk(s) of {self.k_chunk}"
        if self.reverse_chunks:
            text += ", chunks reversed"
        if self.reverse_tiles:
            text += ", tiles reversed"
        return text


def _tile_sum(a: torch.Tensor, b: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    # One tl.dot on the GPU-faithful interpreter: products summed from zero in ascending k
    # (max_num_imprecise_acc ignored, see above). Zero-filled tail elements add exact zeros
    # to a sum that started at +0, so they are left out.
    total = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float32)
    for k in range(lo, hi):
        total += a[:, k:k + 1] * b[:, k][None, :]
    return total


def _chunk_sum(a: torch.Tensor, b: torch.Tensor, begin: int, end: int,
               schedule: Schedule) -> torch.Tensor:
    acc = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float32)
    starts = list(range(begin, end, schedule.block_k))
    if schedule.reverse_tiles:
        starts.reverse()
    for k0 in starts:
        acc = _tile_sum(a, b, k0, min(k0 + schedule.block_k, end)) + acc
    return acc


def emulate_accumulator(a: torch.Tensor, weight_nk: torch.Tensor,
                        schedule: Schedule) -> torch.Tensor:
    """The fp32 total (before the epilogue) of (M, K) fp8 `a` times [N, K] fp8 `weight_nk`."""
    if a.dtype != torch.float8_e4m3fn or weight_nk.dtype != torch.float8_e4m3fn:
        raise TypeError(f"a and weight_nk must be float8_e4m3fn; got {a.dtype} and "
                        f"{weight_nk.dtype}")
    if a.dim() != 2 or weight_nk.dim() != 2 or a.shape[1] != weight_nk.shape[1]:
        raise ValueError(f"a must be (M, K) and weight_nk [N, K] with the same K; got "
                         f"{tuple(a.shape)} and {tuple(weight_nk.shape)}")
    # FP8 x FP8 products are exact in fp32 (4 + 4 significant bits).
    a32 = a.detach().cpu().float()
    b32 = weight_nk.detach().cpu().float()
    k = a32.shape[1]
    chunks = [_chunk_sum(a32, b32, s * schedule.k_chunk,
                         min((s + 1) * schedule.k_chunk, k), schedule)
              for s in range(schedule.split_k)]
    if schedule.split_k == 1:
        return chunks[0]
    if schedule.reverse_chunks:
        chunks.reverse()
    total = torch.zeros_like(chunks[0])
    for chunk in chunks:
        total = total + chunk
    return total


def apply_epilogue(total: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                   bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """fp8_epilogue.py's order: scale = a_scale * b_scale, total * scale, + bias, cast."""
    scale = a_scale.detach().cpu().float().reshape(()) * b_scale.detach().cpu().float().reshape(())
    out = total * scale
    if bias is not None:
        out = out + bias.detach().cpu().float()[None, :]
    return out.to(out_dtype)


def emulate_fp8_gemm(a: torch.Tensor, weight_nk: torch.Tensor, a_scale: torch.Tensor,
                     b_scale: torch.Tensor, bias: torch.Tensor | None, schedule: Schedule, *,
                     out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """What `ops.fp8_scaled_mm` must return, bit for bit, on the interpreter (on the CPU)."""
    return apply_epilogue(emulate_accumulator(a, weight_nk, schedule), a_scale, b_scale, bias,
                          out_dtype)
