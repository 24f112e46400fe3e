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


@triton.jit
def wait_for_previous_grid(USE_PDL: tl.constexpr):
    # Wait until the previous grid's writes are visible before any load or store, then let
    # the next PDL launch start queueing behind this one (it waits the same way, so it never
    # sees partial output). A plain launch is already ordered: nothing to do.
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
