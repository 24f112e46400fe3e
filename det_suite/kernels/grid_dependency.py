"""What a program does first when its launch may overlap the previous kernel.

With programmatic dependent launch (SM90+: `LaunchConfig.use_pdl` for the FP8 GEMMs,
`ops.launch.programmatic_launch` for the batch-invariant ops) the GPU may start a grid
while the one before it on the stream is still draining. Shared by every kernel launched
that way, so they all order themselves the same way; the lint checks each PDL launch waits
before its first memory access.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# USE_PDL values. False / 0: a plain launch. True / 1: wait, then release the next PDL launch.
# RELEASE_FIRST (2): release the next launch, then wait. Both orders are safe, because a
# dependent's own wait returns only once this whole grid has completed and its writes are
# visible; releasing first lets the next kernel (a GEMM that prefetches its weight,
# `l2_prefetch.py`) be resident one kernel earlier, at the cost of its programs holding
# SM slots while they wait.
RELEASE_FIRST = 2
# The first compute capability (10 * major + minor) with programmatic dependent launch:
# where the ops use it (`ops.launch.programmatic_launch`) and the lint compiles it.
PDL_MIN_CAPABILITY = 90
_RELEASE_FIRST = tl.constexpr(RELEASE_FIRST)


@triton.jit
def wait_for_previous_grid(USE_PDL: tl.constexpr):
    # Wait until the previous grid's writes are visible before any load or store, and let
    # the next PDL launch start queueing behind this one (it waits the same way, so it never
    # sees partial output). A plain launch is already ordered: nothing to do.
    if USE_PDL:
        if USE_PDL == _RELEASE_FIRST:
            gdc_launch_dependents()
        gdc_wait()
        if USE_PDL != _RELEASE_FIRST:
            gdc_launch_dependents()
