"""An FP8 scaled-MM with FP32 promotion on two math warpgroups that run out of phase
(Gluon, SM90 only; a developer prototype for issue 10, not a result dependency).

Why: promoting the MMA's partial sum into the fp32 accumulator needs the warpgroup's wgmmas
to have finished (`wgmma.wait_group 0`), and within one warpgroup that wait cannot be hidden
(docs/kernel-promotion.md). Here one 1-warp partition issues the TMA loads into a ring of
STAGES shared-memory stages, and two 4-warp math partitions each own 64 rows of the
BLOCK_M = 128 tile and share every stage's weight tile. Each math partition releases a stage
on its own, so the two may drift apart by up to the ring's depth; with STAGGER = s the
second starts s K steps behind the first, so one partition's promotion wait overlaps the other's
MMAs instead of leaving the tensor cores idle.

The grid decides persistence: a program walks the tiles pid, pid + grid, ... (grouped order),
so a grid of one program per tile is the plain launch and a grid of one program per SM keeps
each SM's ring filling the next tile's stages while the math partitions store the last one.
The grid must not exceed the tile count (a program without a tile would leave the second math
partition waiting for the first).

The arithmetic per output element is the shipped kernel's (fp8_tma_program.py with the
family's PROMOTE_K): intervals of PROMOTE_K elements of K in ascending order, each summed by
the MMA from zero in k32 steps (the first with its accumulator input off), steps past K
reading TMA's zero fill, then one fp32 add into a zero-initialised accumulator; the epilogue
multiplies by a_scale * b_scale (one fp32 product) and rounds to the output dtype. Whether
the bits are the shipped launch's is measured per cell (tools/pingpong_gemm_sweep.py), never
assumed.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from persistent_tile_order import tile_coordinates  # tools/ is on sys.path (the sweep's)

MATH_ROWS = gl.constexpr(64)  # one warpgroup's wgmma rows


@gluon.jit
def _load_partition(a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                    PROMOTE_K: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    # Whole intervals: the last one's steps past K load TMA's zero fill, as the shipped
    # BLOCK_K = PROMOTE_K tile's last dot does.
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
def _math_partition(a_bufs, b_bufs, ready_bars, empty_bars, go_bar, out_ptr, a_scale_ptr,
                    b_scale_ptr, M, N, K, stride_om, stride_on,
                    HALF: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                    BLOCK_K: gl.constexpr, PROMOTE_K: gl.constexpr, GROUP_M: gl.constexpr,
                    STAGES: gl.constexpr, STAGGER: gl.constexpr):
    STEPS_PER_INTERVAL: gl.constexpr = PROMOTE_K // BLOCK_K
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    num_intervals = gl.cdiv(K, PROMOTE_K)
    num_steps = num_intervals * STEPS_PER_INTERVAL
    if STAGGER > 0:
        # The second warpgroup starts once the first has finished STAGGER - 1 K steps of its
        # first tile and issued the next (fewer when K is shorter, so it always starts). The
        # offset then holds across tiles: a stage is refilled only once both released it.
        if HALF == 1:
            mbarrier.wait(go_bar, 0)
    go_step = gl.minimum(STAGGER, num_steps) - 1  # the first tile's step that releases HALF 1
    scale = gl.load(a_scale_ptr) * gl.load(b_scale_ptr)
    done = 0  # tiles this partition has finished: the ring's position runs on across tiles
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        pid_m, pid_n = tile_coordinates(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        first_step = done * num_steps
        acc = gl.zeros((MATH_ROWS, BLOCK_N), gl.float32, mma_layout)
        part = gl.zeros((MATH_ROWS, BLOCK_N), gl.float32, mma_layout)
        for interval in range(num_intervals):
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
            acc = acc + part
        offs_m = off_m + HALF * MATH_ROWS + gl.arange(0, MATH_ROWS,
                                                       layout=gl.SliceLayout(1, mma_layout))
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
        out = acc * scale
        row_in_range = offs_m < M
        col_in_range = offs_n < N
        gl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
                 out.to(out_ptr.dtype.element_ty),
                 mask=row_in_range[:, None] & col_in_range[None, :])
        done += 1


@gluon.jit(do_not_specialize=["M"])
def pingpong_fp8_mm_kernel(a_desc, b_desc, out_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                           stride_om, stride_on,
                           BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                           PROMOTE_K: gl.constexpr, GROUP_M: gl.constexpr,
                           STAGES: gl.constexpr, STAGGER: gl.constexpr,
                           MATH_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
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
        (_math_partition, (a_bufs, b_bufs, ready_bars, empty_bars, go_bar, out_ptr, a_scale_ptr,
                           b_scale_ptr, M, N, K, stride_om, stride_on, 0, BLOCK_M, BLOCK_N,
                           BLOCK_K, PROMOTE_K, GROUP_M, STAGES, STAGGER)),
        (_math_partition, (a_bufs, b_bufs, ready_bars, empty_bars, go_bar, out_ptr, a_scale_ptr,
                           b_scale_ptr, M, N, K, stride_om, stride_on, 1, BLOCK_M, BLOCK_N,
                           BLOCK_K, PROMOTE_K, GROUP_M, STAGES, STAGGER)),
        (_load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
                           BLOCK_M, BLOCK_N, BLOCK_K, PROMOTE_K, GROUP_M, STAGES)),
    ], [4, 1], [MATH_REGS, LOAD_REGS])
