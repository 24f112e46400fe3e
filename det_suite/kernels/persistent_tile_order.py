"""Which output tile a persistent program's tile index is: `tile_order.py`'s grouped order,
for an index the program walks to instead of its program id. Never part of the arithmetic."""

import triton
import triton.language as tl


@triton.jit
def tile_coordinates(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     GROUP_M: tl.constexpr):
    # GROUP_M row tiles walk the columns together so their weight tiles stay in L2.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
    pid_n = (tile % num_pid_in_group) // group_size_m
    return pid_m, pid_n
