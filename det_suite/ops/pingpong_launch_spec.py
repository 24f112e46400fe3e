"""How a `warp_specialized` tile launches `fp8_scaled_mm_pingpong_kernel` (the Gluon SM90
kernel), as a `launch_spec.KernelCall`; `launch_spec` falls back to the TMA kernel, the
same schedule, where this kernel does not apply (segmented GEMMs, workspace or PDL tiles).

Its descriptors are Gluon's (`gluon_descriptor`): they carry the shared-memory layout the
kernel's TMA copies write, which the Triton descriptor leaves to the compiler.
"""

from __future__ import annotations

from det_suite.policy import LaunchConfig
from det_suite.policy import warp_specialized as ws

KERNEL = "fp8_scaled_mm_pingpong_kernel"


def gluon_descriptor(tensor, block_shape):
    """A Gluon TMA descriptor over a K-contiguous FP8 (rows, K) tensor (real or stand-in)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = gl.NVMMASharedLayout.get_default_for(list(block_shape), gl.float8e4nv)
    return TensorDescriptor(tensor, list(tensor.shape), [tensor.stride(0), 1],
                            list(block_shape), layout)


def applies(config: LaunchConfig, use_tma: bool, workspace: bool, segments: int) -> bool:
    """Whether `config` runs the warp-specialised kernel rather than the TMA one."""
    return (config.warp_specialized and use_tma and not workspace and segments == 1
            and not config.use_pdl and config.promote_k is not None
            and config.block_m == ws.BLOCK_M and config.promote_k % config.block_k == 0)


def pingpong_call(config: LaunchConfig, m: int, n: int, k: int, has_bias: bool):
    from det_suite.ops.launch_spec import (GEMM_KERNEL_OPTIONS, KernelCall, LaunchArg,
                                           triton_cdiv)

    def tensor(role):
        return LaunchArg("tensor", role=role)

    def stride(role, dim):
        return LaunchArg("stride", role=role, dim=dim)

    def integer(value):
        return LaunchArg("int", value=value)

    tiles = triton_cdiv(m, config.block_m) * triton_cdiv(n, config.block_n)
    # Persistent: one program per SM at most (config.max_programs, set by the launcher), and
    # never more programs than tiles (a program without a tile would leave its second math
    # warpgroup waiting for the first).
    programs = min(tiles, config.max_programs) if config.max_programs else tiles
    args = (("a_desc", LaunchArg("gluon_desc", role="a",
                                 block_shape=(config.block_m, config.block_k))),
            ("b_desc", LaunchArg("gluon_desc", role="b_nk",
                                 block_shape=(config.block_n, config.block_k))),
            ("out_ptr", tensor("out")),
            ("bias_ptr", tensor("bias" if has_bias else "a_scale")),  # unread without bias
            ("a_scale_ptr", tensor("a_scale")), ("b_scale_ptr", tensor("b_scale")),
            ("M", integer(m)), ("N", integer(n)), ("K", integer(k)),
            ("K_CHUNK", integer(config.k_chunk(k))),
            ("stride_om", stride("out", 0)), ("stride_on", stride("out", 1)))
    constexprs = (("HAS_BIAS", has_bias), ("SPLIT_K", config.split_k),
                  ("BLOCK_M", config.block_m), ("BLOCK_N", config.block_n),
                  ("BLOCK_K", config.block_k), ("GROUP_M", config.group_m),
                  ("PROMOTE_K", config.promote_k), ("STAGES", config.num_stages),
                  ("STAGGER", ws.STAGGER), ("MATH_REGS", ws.MATH_REGS),
                  ("LOAD_REGS", ws.LOAD_REGS))
    options = (("num_warps", ws.NUM_WARPS), ("maxnreg", ws.MAXNREG),
               *GEMM_KERNEL_OPTIONS.items())
    return KernelCall(KERNEL, (programs,), args, constexprs, options)
