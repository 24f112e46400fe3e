"""Positive controls for the batch-invariant ops' tests: launchers that give a call another
reduction schedule, as an implementation that chose its schedule by the row count would.
A row-invariance test runs the small call through one and must see different bits."""

import torch
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


def normaliser_sensitive_logits(rows: int, vocab: int, *, seed: int, device) -> torch.Tensor:
    """bf16 logits whose log_softmax shows any change in the order of the row's sum.

    Random logits hide it: with a row max of ~18, the normaliser max + log(sum) is an fp32
    number of ~18 whose ulp (1.9e-6) swallows the sum's last-bit differences (~1e-7
    relative), so a control with another grouping often gives the same bits (on the H200,
    7 rows of scale-4 logits did). Here each row has one logit 0 (the max) and the rest near
    -16: the normaliser is log(1 + ~0.02), near 0, where fp32 resolves every rounding of
    the sum, and the outputs near -16 move with it."""
    g = torch.Generator().manual_seed(seed)
    x = -16 + 0.5 * torch.randn(rows, vocab, generator=g)
    x[torch.arange(rows), torch.randint(0, vocab, (rows,), generator=g)] = 0.0
    return x.to(torch.bfloat16).to(device)
