"""The paged KV cache's tensors: per layer a K and a V cache of shape
(num_pages, page_size, kv_heads, head_dim), in the activation dtype (BF16).

An FP8 KV cache (`kv_cache_quant_algo` FP8, k/v scales) is not used: the cache keeps BF16,
which is exact for what the engine writes, and the checks compare det mode with the control
on the same cache. Page 0 is scratch (never handed out by the pool): padded rows of a CUDA
Graph replay write and read there.
"""

from __future__ import annotations

import torch

SCRATCH_PAGE = 0


def allocate_kv(config, num_pages: int, page_size: int, device,
                dtype=torch.bfloat16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    shape = (num_pages, page_size, config.num_key_value_heads, config.head_dim)
    return [(torch.zeros(shape, dtype=dtype, device=device),
             torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(config.num_hidden_layers)]


def kv_bytes_per_token(config, dtype=torch.bfloat16) -> int:
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * element
