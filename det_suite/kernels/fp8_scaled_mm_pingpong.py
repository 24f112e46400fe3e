"""The FP8 scaled-MM of `fp8_scaled_mm_tma.py` on two math warpgroups that run out of phase,
fed by a TMA producer warp, on a persistent grid (Gluon, SM90 only).

Why: promoting the MMA's partial sum into the fp32 accumulator needs the warpgroup's wgmmas
finished (`wgmma.wait_group 0`), and inside one warpgroup that wait cannot be hidden
(docs/kernel-promotion.md). Here a 1-warp partition issues the TMA loads into a ring of
STAGES shared-memory stages, and two 4-warp math partitions each own 64 rows of the
BLOCK_M = 128 tile and share every stage's weight tile. A stage is refilled once both
released it; the second partition starts STAGGER K steps behind the first, so one
partition's promotion wait falls on the other's MMAs.

Persistent: program p walks tiles p, p + grid, ... in the grouped order, its ring position
running on across tiles, so the load warp fills the next tile's stages while the math
partitions store the last one. The grid (one program per SM, at most one per tile) may
follow M; nothing in the arithmetic does.

Same reduction schedule, same arithmetic as the shipped TMA tile with BLOCK_K = PROMOTE_K:
K split into SPLIT_K chunks of K_CHUNK elements (whole promotion intervals), inside a chunk
intervals of PROMOTE_K elements in ascending order, each summed by the MMA from zero in k32
steps (steps past K read TMA's zero fill), then one fp32 add into the chunk's
zero-initialised accumulator; chunks added to a zero-initialised total in ascending order
(SPLIT_K = 1: the chunk's accumulator is the total). Epilogue: times a_scale * b_scale,
plus bias, in fp32, then the cast (`fp8_epilogue.py`'s order). That the MMA unit gives the
same bits this way is measured, never assumed: the sm90 suite compares it with the TMA tile.

The Triton interpreter cannot run Gluon (its layouts, shared memory, mbarriers and
warp_specialize have no interpreter); on the CPU the launcher runs the TMA tile instead,
whose schedule this is, and the lint cross-compiles this kernel for sm_90a.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from det_suite.kernels.persistent_tile_order import tile_coordinates

MATH_ROWS = gl.constexpr(64)  # one warpgroup's wgmma rows


@gluon.jit
def _load_partition(a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                    PROMOTE_K: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    # Whole intervals: the last one's steps past K load TMA's zero fill, as the shipped
    # tile's last dot does.
    num_steps = gl.cdiv(K, PROMOTE_K) * (PROMOTE_K // BLOCK_K)
    done = 0  # tiles this program has loaded: the ring's position runs on across tiles
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        pid_m, pid_n = tile_coordinates(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        for k_step in range(num_steps):
            step = done * num_steps + k_step
            stage = step % STAGES
            # mbarriers start with phase 1 complete: the first pass over the ring does not
            # wait.
            mbarrier.wait(empty_bars.index(stage), ((step // STAGES) & 1) ^ 1)
            ready = ready_bars.index(stage)
            mbarrier.expect(ready, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, k_step * BLOCK_K], ready,
                                            a_bufs.index(stage))
            tma.async_copy_global_to_shared(b_desc, [off_n, k_step * BLOCK_K], ready,
                                            b_bufs.index(stage))
        done += 1


@gluon.jit
def _sum_intervals(a_bufs, b_bufs, ready_bars, empty_bars, go_bar, first_step, i_begin, i_end,
                   go_step, HALF: gl.constexpr, BLOCK_N: gl.constexpr,
                   STEPS_PER_INTERVAL: gl.constexpr, STAGES: gl.constexpr,
                   STAGGER: gl.constexpr, mma_layout: gl.constexpr):
    """Intervals [i_begin, i_end) of one tile: each summed by the MMA from zero, then added
    into a zero-initialised fp32 accumulator in ascending order."""
    acc = gl.zeros((MATH_ROWS, BLOCK_N), gl.float32, mma_layout)
    part = gl.zeros((MATH_ROWS, BLOCK_N), gl.float32, mma_layout)
    for interval in range(i_begin, i_end):
        for t in gl.static_range(STEPS_PER_INTERVAL):
            step = first_step + interval * STEPS_PER_INTERVAL + t
            stage = step % STAGES
            mbarrier.wait(ready_bars.index(stage), (step // STAGES) & 1)
            a_rows = a_bufs.index(stage).slice(HALF * MATH_ROWS, MATH_ROWS)
            b_cols = b_bufs.index(stage).permute((1, 0))
            part = warpgroup_mma(a_rows, b_cols, part, use_acc=t > 0, is_async=True)
            if t > 0:
                # The previous step's MMAs are done with their stage.
                part = warpgroup_mma_wait(num_outstanding=1, deps=[part])
                mbarrier.arrive(empty_bars.index((step - 1) % STAGES), count=1)
            if STAGGER > 0:
                if HALF == 0:
                    mbarrier.arrive(go_bar, count=1, pred=step == go_step)
        part = warpgroup_mma_wait(num_outstanding=0, deps=[part])
        last = first_step + (interval + 1) * STEPS_PER_INTERVAL - 1
        mbarrier.arrive(empty_bars.index(last % STAGES), count=1)
        acc = acc + part  # the promotion: one fp32 add per interval
    return acc


@gluon.jit
def _math_partition(a_bufs, b_bufs, ready_bars, empty_bars, go_bar, out_ptr, bias_ptr,
                    a_scale_ptr, b_scale_ptr, M, N, K, K_CHUNK, stride_om, stride_on,
                    HALF: gl.constexpr, HAS_BIAS: gl.constexpr, SPLIT_K: gl.constexpr,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                    PROMOTE_K: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                    STAGGER: gl.constexpr):
    STEPS_PER_INTERVAL: gl.constexpr = PROMOTE_K // BLOCK_K
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    num_intervals = gl.cdiv(K, PROMOTE_K)
    num_steps = num_intervals * STEPS_PER_INTERVAL
    chunk_intervals = K_CHUNK // PROMOTE_K  # the launch passes whole intervals per chunk
    if STAGGER > 0:
        # The second warpgroup starts once the first has issued its first tile's STAGGER-th
        # K step (fewer when K is shorter, so it always starts). The offset then holds
        # across tiles: a stage is refilled only once both released it.
        if HALF == 1:
            mbarrier.wait(go_bar, 0)
    go_step = gl.minimum(STAGGER, num_steps) - 1
    scale = gl.load(a_scale_ptr) * gl.load(b_scale_ptr)
    done = 0  # tiles this partition has finished: the ring's position runs on across tiles
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        pid_m, pid_n = tile_coordinates(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        first_step = done * num_steps
        if SPLIT_K == 1:
            total = _sum_intervals(a_bufs, b_bufs, ready_bars, empty_bars, go_bar, first_step,
                                   0, num_intervals, go_step, HALF, BLOCK_N,
                                   STEPS_PER_INTERVAL, STAGES, STAGGER, mma_layout)
        else:
            # Split-K in registers: each chunk into a fresh accumulator, chunks added to a
            # zero-initialised total in ascending order (the workspace fix-up's sum).
            total = gl.zeros((MATH_ROWS, BLOCK_N), gl.float32, mma_layout)
            for split in range(SPLIT_K):
                i_begin = split * chunk_intervals
                i_end = gl.minimum(i_begin + chunk_intervals, num_intervals)
                total += _sum_intervals(a_bufs, b_bufs, ready_bars, empty_bars, go_bar,
                                        first_step, i_begin, i_end, go_step, HALF, BLOCK_N,
                                        STEPS_PER_INTERVAL, STAGES, STAGGER, mma_layout)
        offs_m = pid_m * BLOCK_M + HALF * MATH_ROWS + gl.arange(
            0, MATH_ROWS, layout=gl.SliceLayout(1, mma_layout))
        offs_n = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
        row_in_range = offs_m < M
        col_in_range = offs_n < N
        # fp8_epilogue.py's order: scale, then bias, two fp32 roundings, then the cast.
        out = total * scale
        if HAS_BIAS:
            bias = gl.load(bias_ptr + offs_n, mask=col_in_range, other=0.0).to(gl.float32)
            out = out + bias[None, :]
        gl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
                 out.to(out_ptr.dtype.element_ty),
                 mask=row_in_range[:, None] & col_in_range[None, :])
        done += 1


# M is never specialised (as in the swapped kernel): M == 1 would compile a second kernel.
@gluon.jit(do_not_specialize=["M"])
def fp8_scaled_mm_pingpong_kernel(
    a_desc, b_desc, out_ptr, bias_ptr, a_scale_ptr, b_scale_ptr,
    M, N, K, K_CHUNK,
    stride_om, stride_on,
    HAS_BIAS: gl.constexpr,
    SPLIT_K: gl.constexpr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
    GROUP_M: gl.constexpr,
    PROMOTE_K: gl.constexpr,
    STAGES: gl.constexpr, STAGGER: gl.constexpr,
    MATH_REGS: gl.constexpr, LOAD_REGS: gl.constexpr,
):
    gl.static_assert(BLOCK_M == 2 * MATH_ROWS, "two math warpgroups of 64 rows each")
    gl.static_assert(PROMOTE_K % BLOCK_K == 0, "an interval is whole K steps")
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    go_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready_bars.index(s), count=1)
        # Both math partitions release a stage before it is refilled.
        mbarrier.init(empty_bars.index(s), count=2)
    mbarrier.init(go_bar, count=1)
    gl.warp_specialize([
        (_math_partition, (a_bufs, b_bufs, ready_bars, empty_bars, go_bar, out_ptr, bias_ptr,
                           a_scale_ptr, b_scale_ptr, M, N, K, K_CHUNK, stride_om, stride_on,
                           0, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_K,
                           GROUP_M, STAGES, STAGGER)),
        (_math_partition, (a_bufs, b_bufs, ready_bars, empty_bars, go_bar, out_ptr, bias_ptr,
                           a_scale_ptr, b_scale_ptr, M, N, K, K_CHUNK, stride_om, stride_on,
                           1, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_K,
                           GROUP_M, STAGES, STAGGER)),
        (_load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
                           BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_K, GROUP_M, STAGES)),
    ], [4, 1], [MATH_REGS, LOAD_REGS])
