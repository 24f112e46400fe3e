"""Which output tile a program computes. Never part of the arithmetic of any tile."""

import triton
import triton.language as tl


@triton.jit
def grouped_tile_coordinates(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             GROUP_M: tl.constexpr):
    # Grouped ordering keeps GROUP_M row tiles on the same weight columns for L2 reuse.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n
