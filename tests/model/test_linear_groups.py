"""Stacked projections (`engine.linear_groups`): the det engine runs a layer's q/k/v and
gate/up as one segmented GEMM each. Stacking must cost no memory (members become views of
the stacked buffers, values unchanged), be skipped where a segment would end inside a tile,
and change no bit of the model's outputs."""

import dataclasses

import pytest
import torch

from det_suite.engine.linear_groups import stack_layer_projections, stack_linears
from det_suite.engine.opsets import det_opset
from det_suite.models.synthetic import build_synthetic

pytestmark = pytest.mark.model

STACK_FIELDS = ("stack_projections", "norm_for_group", "group_linear")


@pytest.fixture(scope="module")
def tiny_wide():
    return build_synthetic("tiny-wide", 0)


def _bytes(t):
    return t.contiguous().view(torch.uint8)


def test_members_become_views_of_the_stack_with_unchanged_values(tiny):
    layer = dataclasses.replace(tiny.layers[0])
    originals = [layer.gate_proj, layer.up_proj]
    group = stack_linears(originals)
    assert group.widths == (originals[0].n, originals[1].n)
    for member, original in zip(group.members, originals):
        assert member.weight.untyped_storage().data_ptr() == \
            group.weight.untyped_storage().data_ptr()
        assert torch.equal(_bytes(member.weight), _bytes(original.weight))
        assert torch.equal(member.weight_scale, original.weight_scale)
        assert torch.equal(member.input_scale, original.input_scale)
        assert member.weight_scale.shape == original.weight_scale.shape


def test_projections_whose_segments_end_inside_a_tile_stay_separate(tiny, device):
    """tiny's q/k/v widths (64, 32, 32): k ends at 96, inside a 64-wide tile, so q/k/v stay
    three GEMMs (and the layer keeps its own linears); gate/up (128, 128) stack."""
    layer = dataclasses.replace(tiny.to(device).layers[0])
    q_proj = layer.q_proj
    qkv, gate_up = stack_layer_projections(layer)
    assert qkv is None and layer.q_proj is q_proj
    assert gate_up is not None and layer.gate_proj is gate_up.members[0]


def test_stacking_a_layer_twice_reuses_its_buffers(tiny_wide):
    layer = dataclasses.replace(tiny_wide.layers[1])
    first = stack_layer_projections(layer)
    assert all(group is not None for group in first)
    again = stack_layer_projections(layer)
    assert all(a is b for a, b in zip(again, first, strict=True))


def test_stacked_fields_go_together():
    with pytest.raises(ValueError, match="go together"):
        dataclasses.replace(det_opset(), group_linear=None)


def test_stacked_projections_keep_every_bit_of_the_model(tiny_wide, device, completions_with):
    """Prefill and decode through the engine with q/k/v and gate/up stacked equal the same
    det op set running the seven linears one by one (small K: both schedules are one
    chunk of BLOCK_K tiles)."""
    stacked = det_opset()
    separate = dataclasses.replace(stacked, **dict.fromkeys(STACK_FIELDS))
    compared = 0
    for a, b in zip(completions_with(tiny_wide, stacked, device),
                    completions_with(tiny_wide, separate, device), strict=True):
        assert a.output_ids == b.output_ids
        assert torch.equal(torch.tensor(a.logprobs), torch.tensor(b.logprobs))
        compared += len(a.logprobs)
    print(f"{compared} logprobs compared, 0 differ")
    assert compared > 0
