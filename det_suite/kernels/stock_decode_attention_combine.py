"""The fast stock arm's decode attention, second half: one program per (request, query
head) merges the slices `stock_decode_attention_split.py` wrote, all at once (a max over
the slices, then exp-weighted sums), and writes acc / sum in the output's dtype, or with
QUANTIZE_OUT that quantized with the o projection's input scale (the quantization an
engine fuses into attention's epilogue; det's e4m3 rounding helper, exact on the CPU
interpreter too). No MMA. Not batch-invariant and
not in `kernels.registry`: see the split kernel's docstring.
"""

import triton
import triton.language as tl

from det_suite.kernels.fp8_quantize import quantize_to_e4m3_grid


@triton.jit
def stock_decode_attention_combine_kernel(
    stats_ptr, acc_ptr, context_lens_ptr,
    q_ptr,  # never read: its dtype is the one the output is rounded to
    out_ptr, out_scale_ptr,
    stride_sr, stride_sh, stride_ss,
    stride_ar, stride_ah, stride_as,
    stride_or, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_KV: tl.constexpr,
    NUM_SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
    QUANTIZE_OUT: tl.constexpr, FP8_MAX: tl.constexpr,
):
    request = tl.program_id(0)
    head = tl.program_id(1)

    keys = tl.load(context_lens_ptr + request) + 1
    split_len = tl.cdiv(tl.cdiv(keys, NUM_SPLITS), BLOCK_KV) * BLOCK_KV
    used = tl.cdiv(keys, split_len)           # the splits the split kernel wrote

    offs_s = tl.arange(0, SPLITS_P2)
    split_was_written = offs_s < used
    offs_d = tl.arange(0, HEAD_DIM)
    stats = stats_ptr + request.to(tl.int64) * stride_sr + head * stride_sh + offs_s * stride_ss
    seg_max = tl.load(stats, mask=split_was_written, other=float("-inf"))
    seg_sum = tl.load(stats + 1, mask=split_was_written, other=0.0)
    seg_acc = tl.load(acc_ptr + request.to(tl.int64) * stride_ar + head * stride_ah
                      + offs_s[:, None] * stride_as + offs_d[None, :],
                      mask=split_was_written[:, None], other=0.0)
    top = tl.max(seg_max, 0)
    weight = tl.where(split_was_written, tl.exp(seg_max - top), 0.0)
    total = tl.sum(weight * seg_sum, 0)
    out = (tl.sum(weight[:, None] * seg_acc, 0) / total).to(q_ptr.dtype.element_ty)
    if QUANTIZE_OUT:  # rounded to q's dtype first, as an unfused quantization would see it
        out = quantize_to_e4m3_grid(out, tl.load(out_scale_ptr), FP8_MAX)
    tl.store(out_ptr + request.to(tl.int64) * stride_or + head * stride_oh + offs_d,
             out.to(out_ptr.dtype.element_ty))
