"""Positive controls for the batch-invariant ops' tests: launchers that give a call another
reduction schedule, as an implementation that chose its schedule by the row count would.
A row-invariance test runs the small call through one and must see different bits."""

import triton


def log_softmax_schedule_by_rows(slice_v: int, block_v: int):
    """A launcher for log_softmax's two kernels that cuts each row into `slice_v`-position
    slices of `block_v` lanes instead of the op's SLICE_V and BLOCK_V (both powers of two;
    `slice_v` no smaller than the op's, since the workspace holds the op's slice count)."""
    def launcher(kernel, call, args, keywords):
        v = dict(call.args)["V"].value
        slices = -(-v // slice_v)
        control = {"SLICE_V": slice_v, "BLOCK_V": block_v}
        if "SLICES" in keywords:
            control["SLICES"] = triton.next_power_of_2(slices)
        grid = (call.grid[0], slices)
        return kernel[grid](*args, **{**keywords, **control})
    return launcher

