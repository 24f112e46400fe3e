"""The fp32 reference forward (transformers' Qwen3 with BF16-dequantized weights): the yardstick
det mode's logprobs are held to (issue 12, "the fast path is right, not only stable")."""

import dataclasses

import pytest
import torch

pytestmark = pytest.mark.model

PROMPT = list(range(30, 54))


@pytest.fixture(scope="module")
def model(tiny):
    from det_suite.models.reference import reference_model
    return reference_model(tiny)


def test_logprobs_are_fp32_one_per_next_token(tiny, model):
    from det_suite.models.reference import reference_logprobs
    logprobs = reference_logprobs(tiny, PROMPT, model=model)
    assert logprobs.dtype == torch.float32 and logprobs.shape == (len(PROMPT) - 1,)
    assert bool(torch.isfinite(logprobs).all()) and bool((logprobs <= 0).all())


def test_a_logprob_is_the_log_softmax_entry_of_the_next_token(tiny, model):
    from det_suite.models.reference import reference_logprobs
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([PROMPT]), use_cache=False).logits[0]
    expected = torch.log_softmax(logits[3].float(), -1)[PROMPT[4]]
    assert torch.equal(reference_logprobs(tiny, PROMPT, model=model)[3], expected)


@pytest.mark.parametrize("name", ["q_proj", "v_proj", "down_proj"])
def test_the_model_holds_the_dequantized_weights_exactly(tiny, model, name):
    linear = getattr(tiny.layers[1], name)
    held = model.model.layers[1].get_submodule(
        {"q_proj": "self_attn.q_proj", "v_proj": "self_attn.v_proj",
         "down_proj": "mlp.down_proj"}[name]).weight
    assert held.dtype == torch.float32
    assert torch.equal(held, linear.weight.float() * linear.weight_scale)


def test_it_matches_transformers_built_the_ordinary_way(tiny, model):
    """The meta-device build with assigned weights and rebuilt rotary frequencies computes
    exactly what a normally constructed transformers model with the same weights computes."""
    from transformers import Qwen3ForCausalLM

    from det_suite.models.reference import dequantized_state_dict
    config = tiny.config.__class__.from_dict(tiny.config.to_dict())
    plain = Qwen3ForCausalLM(config).float().eval()
    plain.load_state_dict(dequantized_state_dict(tiny))
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        assert torch.equal(plain(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_prefix_gets_the_same_logprobs(tiny, model):
    from det_suite.models.reference import reference_logprobs
    full = reference_logprobs(tiny, PROMPT, model=model)
    prefix = reference_logprobs(tiny, PROMPT[:9], model=model)
    # Accuracy reference, not an invariance claim: a longer call may group fp32 sums
    # differently, so agreement is to fp32 rounding, not bits.
    torch.testing.assert_close(prefix, full[:8], rtol=0, atol=1e-5)


def test_the_weights_and_scales_are_read(tiny, model):
    """Control: doubling one weight scale moves the logprobs, so the reference is not blind
    to the checkpoint it is given."""
    from det_suite.models.reference import reference_logprobs
    layer = tiny.layers[0]
    bent = dataclasses.replace(layer.o_proj, weight_scale=layer.o_proj.weight_scale * 2)
    other = dataclasses.replace(tiny, layers=[dataclasses.replace(layer, o_proj=bent),
                                              *tiny.layers[1:]])
    assert not torch.equal(reference_logprobs(other, PROMPT),
                           reference_logprobs(tiny, PROMPT, model=model))


@pytest.mark.parametrize("ids", [[5], [], [1, 2, 259], [1, -1], [1, 2.0]],
                         ids=["one-token", "empty", "past-vocab", "negative", "float"])
def test_bad_token_ids_are_refused(tiny, model, ids):
    from det_suite.models.reference import reference_logprobs
    with pytest.raises(ValueError, match="token_ids"):
        reference_logprobs(tiny, ids, model=model)
