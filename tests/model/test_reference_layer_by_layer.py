"""The reference forward one layer at a time (what calibration uses, so that a 32B shape
calibrates on one GPU): the same logits, bit for bit, as the whole model held at once, and
no layer's weights held once the forward is done."""

import pytest
import torch

from det_suite.models.reference import reference_model

pytestmark = pytest.mark.model


@pytest.mark.parametrize("fixture", ["tiny", "tiny_tied"])
def test_layer_by_layer_gives_the_whole_models_logits(fixture, request):
    ckpt = request.getfixturevalue(fixture)
    ids = torch.arange(20, 52)[None]
    with torch.inference_mode():
        whole = reference_model(ckpt)(input_ids=ids, use_cache=False).logits
        lazy = reference_model(ckpt, layer_by_layer=True)(input_ids=ids, use_cache=False).logits
    assert torch.equal(whole, lazy)


def test_each_layer_drops_its_weights_after_its_forward(tiny):
    model = reference_model(tiny, layer_by_layer=True)
    with torch.inference_mode():
        model(input_ids=torch.arange(3, 9)[None], use_cache=False)
        again = model(input_ids=torch.arange(3, 9)[None], use_cache=False).logits
    held = {p.device.type for block in model.model.layers for p in block.parameters()}
    assert held == {"meta"}
    assert torch.isfinite(again).all()   # a second forward fills the layers again


def test_a_bad_layer_by_layer_control_differs(tiny):
    """The check can fail: a model whose first layer is skipped gives other logits."""
    model = reference_model(tiny, layer_by_layer=True)
    ids = torch.arange(20, 52)[None]
    with torch.inference_mode():
        good = model(input_ids=ids, use_cache=False).logits
        model.model.layers[0].register_forward_hook(lambda _m, args, _out: args[0])
        skipped = model(input_ids=ids, use_cache=False).logits
    assert not torch.equal(good, skipped)
