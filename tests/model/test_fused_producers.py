"""The det op set's fused ops against the same op set composing them from its plain ops:
norm + quantization for q/k/v and gate/up (with the residual add before it), product +
quantization for down, q/k norm + RoPE + KV write, attention + quantization for o, and
q/k/v and gate/up stacked into one GEMM each where tiny's widths allow (gate/up). The
model's outputs must be identical in every bit, prefill and decode. This is what lets a
GSM8K fixture recorded before the fusions check exactly after them."""

import dataclasses

import pytest
import torch

from det_suite.backends.interface import Request
from det_suite.engine import Engine
from det_suite.engine.opsets import det_opset

pytestmark = pytest.mark.model


def _completions(tiny, ops, device):
    engine = Engine(tiny, mode="det", ops=ops, page_size=4, max_seq_len=32, num_pages=24,
                    device=device)
    prompts = [tuple(range(3, 12)), tuple(range(40, 45))]
    return engine.generate([Request(prompt_ids=p, max_new_tokens=3, logprobs_from=1)
                            for p in prompts])


def test_fused_ops_keep_every_bit_of_the_model(tiny, device):
    fused = det_opset()
    fields = ("norm_for_linears", "gated_for_linear", "qk_norm_rope_write",
              "attention_for_linear", "stack_projections", "norm_for_group", "group_linear")
    assert all(getattr(fused, name) is not None for name in fields)
    composed = dataclasses.replace(fused, **dict.fromkeys(fields))
    compared = 0
    for a, b in zip(_completions(tiny, fused, device), _completions(tiny, composed, device)):
        assert a.output_ids == b.output_ids
        assert torch.equal(torch.tensor(a.logprobs), torch.tensor(b.logprobs))
        compared += len(a.logprobs)
    print(f"{compared} logprobs compared, 0 differ")
    assert compared > 0
