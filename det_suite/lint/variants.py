"""Every kernel variant a table entry can select, as launches bound to stand-in tensors.

What is launched is not restated here: `ops.gemm_launch_spec` describes every launch
`ops.launch_fp8_gemm` makes (kernel, runtime arguments in parameter order, constexprs,
options), `ops.quantize_launch_spec` the one `ops.launch_quantize` makes, and the lint binds
those same descriptions to stand-ins (`lint.standins`).

What is compiled, per table entry and target (one "variant" = one PTX listing):

- every m_tile of the entry (`TableEntry.variants()`: its BLOCK_M, BLOCK_N, warps, stages,
  loads, workspace and fix-up), at the table's pipeline depth and at every depth in
  `override_stages` (default `targets.OVERRIDE_STAGES`, 2 and 3: `fp8_linear(num_stages=...)`
  overrides the table's depth for every M);
- the launch shape the tile selects: single pass (`fp8_scaled_mm*` with
  WRITE_PARTIALS=False), or, for a workspace tile (use_workspace and split_k > 1), the
  partial-writing launch with the fused fix-up (FUSED_FIXUP: the last program of a tile
  sums the partials) or followed by `fp8_splitk_reduce_kernel` (fused_fixup false). A
  workspace tile is also compiled single-pass, since all shapes promise the same
  arithmetic; the reduce kernel must hold no MMA;
- the loads the tile selects, decided by `ops.selects_tma` on the stand-in operands: a
  use_tma tile runs `fp8_scaled_mm_tma_kernel` (TMA descriptors with block shapes
  [BLOCK_M, BLOCK_K] and [BLOCK_N, BLOCK_K]; with SWAP_AB for a swap_ab tile, the
  weight on the MMA's row side) on operands `ops.tma_compatible` accepts and
  the pointer kernel on others (a swap_ab tile with `SWAP_FALLBACK_BLOCK_M` rows), so both
  are compiled: for an (N, K) entry the pointer fallback on an activation whose base is
  not 16-byte aligned, for the default entry at its K % 16 != 0 case; other tiles run the
  pointer kernel;
- for the family default entry (K unknown): K with EVEN_K True, a K tail (EVEN_K False)
  and a K that is not a multiple of 16 (no divisibility hint on K and the row strides;
  TMA is not possible there); for an (N, K) entry only the K it names;
- arguments specialised the way the Triton runtime specialises them (`lint.jobs`), for a
  representative M of each tile (its upper bound, or 4096 when unbounded) plus M = 1 for
  the tile M = 1 selects: a decode call makes Triton specialise M to the constant 1, a
  separate kernel.

- for an SM90 tile the warp-specialised kernel could run (`warp_specialized_candidate`:
  128 rows, TMA, no workspace, BLOCK_K the promotion interval) that does not set
  `warp_specialized`, that kernel too (launch "warp-specialized check", the table's
  stages): its MMA must be the entry's before a table turns it on.

Also compiled, per target, once: every kernel of `det_suite.kernels.registry` that must
hold no MMA (`FIXED_KERNELS`: the split-K reduce, the quantization), at a representative
launch, since a table need not select it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable

from det_suite.kernels import registry
from det_suite.lint.standins import (KernelLaunch, bind_call, gemm_operands, gemm_tensors,
                                     quantize_tensors)

if TYPE_CHECKING:
    from det_suite.ops import KernelCall
    from det_suite.policy import LaunchConfig, TableEntry

# Representative shapes for a family default entry (N, K unknown) and the fixed kernels.
REPRESENTATIVE_N = 4096
REPRESENTATIVE_K = 4096
UNBOUNDED_M = 4096
# Added to a whole number of BLOCK_K tiles for the default entry's misaligned K.
MISALIGNED_K_OFFSET = 8

# How a variant relates to the tile's own launch.
LAUNCH_SELECTED = "selected"              # what the op launches for this tile
LAUNCH_POINTER_FALLBACK = "pointer fallback"  # use_tma tile, operands not TMA-compatible
LAUNCH_SINGLE_PASS = "single-pass check"  # workspace tile compiled without the workspace
# A tile the warp-specialised kernel could run, compiled that way (`warp_specialized_candidate`).
WARP_SPECIALIZED_CHECK = "warp-specialized check"


@dataclass(frozen=True)
class GemmCase:
    """One launch of a policy-driven kernel: a launch config and the shape it serves."""

    config: "LaunchConfig"
    m: int
    n: int
    k: int

    @property
    def even_k(self) -> bool:
        return self.k % self.config.block_k == 0


@dataclass(frozen=True)
class GemmLaunch:
    """One way the op may launch the GEMM for a case, and its kernel calls."""

    case: GemmCase             # config as launched (use_workspace cleared for a single-pass check)
    use_tma: bool              # the TMA kernel (else the pointer kernel)
    launch: str                # LAUNCH_SELECTED | LAUNCH_POINTER_FALLBACK | LAUNCH_SINGLE_PASS
    calls: tuple[tuple["KernelCall", KernelLaunch], ...]

    @property
    def fixup(self) -> str:
        """How split-K partials are summed: 'fused', 'reduce' or '' (no workspace)."""
        cfg = self.case.config
        if not cfg.use_workspace:
            return ""
        return "fused" if cfg.fused_fixup else "reduce"


def gemm_launches(case: GemmCase, *, pointer_fallback: bool = True) -> list[GemmLaunch]:
    """Every launch the op may make for `case`: the tile's own launch; for a use_tma tile
    whose operands TMA can take, also the pointer kernel on operands it cannot take
    (`pointer_fallback`); for a workspace tile, each of those single-pass as well."""
    from det_suite.ops import gemm_launch_spec, selects_tma, tma_compatible

    cfg, m, n, k = case.config, case.m, case.n, case.k
    operands = [(gemm_operands(m, n, k), LAUNCH_SELECTED)]
    if pointer_fallback and cfg.use_tma and tma_compatible(*operands[0][0]):
        operands.append((gemm_operands(m, n, k, aligned=False), LAUNCH_POINTER_FALLBACK))
    shapes = [(cfg, None)]
    if cfg.use_workspace:
        shapes.append((replace(cfg, use_workspace=False), LAUNCH_SINGLE_PASS))
    out = []
    for config, shape_role in shapes:
        for (a, b_kn), load_role in operands:
            use_tma = selects_tma(config, a, b_kn)  # as ops.launch_fp8_gemm decides
            spec = gemm_launch_spec(config, m, n, k, has_bias=False, use_tma=use_tma)
            tensors = gemm_tensors(spec, a, b_kn)
            calls = tuple((call, bind_call(call, tensors)) for call in spec.calls)
            out.append(GemmLaunch(replace(case, config=config), use_tma,
                                  shape_role or load_role, calls))
    return out


# ------------------------------------------------------------------- table entries

def m_ranges(entry: "TableEntry") -> list[tuple[int, int | None]]:
    """(lowest, highest or None) M that selects each of the entry's m_tiles."""
    ranges, low = [], 1
    for tile in entry.m_tiles:
        ranges.append((low, tile.max_m))
        if tile.max_m is not None:
            low = tile.max_m + 1
    return ranges


def range_text(low: int, high: int | None) -> str:
    if high is None:
        return f">={low}"
    return str(low) if high == low else f"{low}-{high}"


def entry_cases(entry: "TableEntry", override_stages: Iterable[int]):
    """(tile index, m range, stages source, GemmCase) for every variant to compile."""
    if entry.k is None:
        n = REPRESENTATIVE_N
        whole = REPRESENTATIVE_K - REPRESENTATIVE_K % entry.block_k
        ks = [whole,                               # EVEN_K True
              whole + entry.block_k // 2,          # K tail, K % 16 == 0
              whole + MISALIGNED_K_OFFSET]         # K tail, K % 16 != 0: no TMA, no hints
    else:
        n, ks = entry.n, [entry.k]
    for index, (config, (low, high)) in enumerate(zip(entry.variants(), m_ranges(entry))):
        if high is not None and high < low:
            continue  # unreachable tile: no M selects it
        ms = []
        if low == 1:
            ms.append(1)  # decode: Triton specialises M == 1 to a constant
        general = high if high is not None else max(UNBOUNDED_M, low)
        if general != 1:
            ms.append(general)
        stages = {config.num_stages: "table"}
        for s in override_stages:
            stages.setdefault(s, "override")
        for num_stages, source in sorted(stages.items()):
            staged = replace(config, num_stages=num_stages)
            for k in ks:
                for m in ms:
                    yield index, range_text(low, high), source, GemmCase(staged, m, n, k)
        # A tile the warp-specialised kernel could run (policy.warp_specialized): compiled
        # that way too, so its MMA is proven the entry's before a table turns it on.
        pingpong = warp_specialized_candidate(config)
        if pingpong is not None:
            for k in ks:
                yield index, range_text(low, high), "table", GemmCase(pingpong, ms[-1], n, k)


def entry_calls(entry: "TableEntry", override_stages: tuple[int, ...]):
    """(tile index, m range, stages source, GemmLaunch, KernelCall, KernelLaunch) for every
    kernel call the entry's tiles may make."""
    # The default entry reaches a use_tma tile's pointer kernel through its K % 16 != 0
    # case; an (N, K) entry through operands TMA cannot take.
    fallback = entry.k is not None
    tiles = entry.variants()
    out = []
    for index, m_range, source, case in entry_cases(entry, override_stages):
        # A warp-specialised compile of a tile that is not one: a check, not a launch the
        # table makes (its pointer fallback is the tile's own, compiled already).
        check = case.config.warp_specialized and not tiles[index].warp_specialized
        for launch in gemm_launches(case, pointer_fallback=fallback and not check):
            if check:
                launch = replace(launch, launch=WARP_SPECIALIZED_CHECK)
            out += [(index, m_range, source, launch, call, bound) for call, bound in launch.calls]
    return tuple(out)


def warp_specialized_candidate(config: "LaunchConfig"):
    """`config` as a warp-specialised tile, if a table could ask for that; else None. A tile
    that already is one is compiled as selected."""
    from det_suite.policy.tiles import MTile
    from det_suite.policy.warp_specialized import (gluon_release_supported,
                                                   warp_specialized_problems)

    if config.warp_specialized or config.promote_k is None or not gluon_release_supported():
        return None
    tile = MTile(max_m=None, block_m=config.block_m, num_warps=config.num_warps,
                 num_stages=config.num_stages, use_workspace=config.use_workspace,
                 use_tma=config.use_tma, use_pdl=config.use_pdl, swap_ab=config.swap_ab,
                 block_n=config.block_n, block_k=config.block_k,
                 prefetch_k=config.prefetch_k, warp_specialized=True)
    if warp_specialized_problems(tile, tile, "sm90", config.promote_k):
        return None
    return replace(config, warp_specialized=True)


# ------------------------------------------------------------------- fixed kernels

# The registry's kernels that must hold no MMA, each also linted once per target.
FIXED_KERNELS: tuple[registry.KernelEntry, ...] = tuple(
    entry for entry in registry.KERNELS.values() if entry.operand_dtype is None)

# A workspace tile with the separate reduce: the GEMM launch that runs the reduce kernel.
REDUCE_CONFIG = dict(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=3,
                     split_k=2, group_m=8, use_workspace=True, fused_fixup=False)


def _reduce_gemm_calls():
    from det_suite.policy import LaunchConfig

    case = GemmCase(LaunchConfig(**REDUCE_CONFIG), UNBOUNDED_M, REPRESENTATIVE_N,
                    REPRESENTATIVE_K)
    return gemm_launches(case)[0].calls


def _quantize_call():
    from det_suite.ops import quantize_launch_spec

    m, k = UNBOUNDED_M, REPRESENTATIVE_K
    call = quantize_launch_spec(m, k)
    return call, bind_call(call, quantize_tensors(m, k))


def fixed_kernel_launch(name: str) -> KernelLaunch:
    """The representative launch of a fixed kernel: a GEMM kernel from the launch that
    runs the split-K reduce, any other from its own launch description."""
    from det_suite.lint.op_kernels import OP_KERNEL_NAMES, op_kernel_launches

    if name in OP_KERNEL_NAMES:  # a batch-invariant op's kernel: its large-M launch
        return op_kernel_launches(name)[-1][1]
    entry = registry.entry(name)
    calls = _reduce_gemm_calls() if entry.gemm else (_quantize_call(),)
    for call, bound in calls:
        if call.kernel == name:
            return bound
    raise KeyError(f"kernel {name!r} must hold no MMA but det_suite.lint.variants has no "
                   "representative launch of it; bind its ops.launch_spec description in "
                   "fixed_kernel_launch")


def reduce_launch() -> KernelLaunch:
    """The split-K reduce as `ops.gemm_launch_spec` launches it at a representative shape."""
    return fixed_kernel_launch("fp8_splitk_reduce_kernel")


def quantize_launch() -> KernelLaunch:
    """The quantization as `ops.quantize_launch_spec` launches it at a representative shape
    (Triton's default options, as ops launches it)."""
    return fixed_kernel_launch("fp8_quantize_kernel")
