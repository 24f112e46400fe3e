"""The det op set's fused ops against the same op set composing them from its plain ops:
norm + quantization for q/k/v and gate/up (with the residual add before it), product +
quantization for down, q/k norm + RoPE + KV write, attention + quantization for o, and
q/k/v and gate/up stacked into one GEMM each where tiny's widths allow (gate/up). The
model's outputs must be identical in every bit, prefill and decode. This is what lets a
GSM8K fixture recorded before the fusions check exactly after them."""

import dataclasses

import pytest
import torch

from det_suite.engine.opsets import det_opset

pytestmark = pytest.mark.model


def test_fused_ops_keep_every_bit_of_the_model(tiny, device, completions_with):
    fused = det_opset()
    fields = ("norm_for_linears", "gated_for_linear", "qk_norm_rope_write",
              "attention_for_linear", "stack_projections", "norm_for_group", "group_linear")
    assert all(getattr(fused, name) is not None for name in fields)
    composed = dataclasses.replace(fused, **dict.fromkeys(fields))
    compared = 0
    for a, b in zip(completions_with(tiny, fused, device),
                    completions_with(tiny, composed, device)):
        assert a.output_ids == b.output_ids
        assert torch.equal(torch.tensor(a.logprobs), torch.tensor(b.logprobs))
        compared += len(a.logprobs)
    print(f"{compared} logprobs compared, 0 differ")
    assert compared > 0
