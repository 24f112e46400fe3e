"""The "is the fast path right" reference: transformers' own Qwen3ForCausalLM, in fp32, with
each FP8 weight dequantized (weight.float() * weight_scale) and no activation quantization.

det mode must agree with it within a stated tolerance; it is not expected to be bit-equal
(the fast path quantizes activations and runs BF16). The same model, run on a short prompt,
calibrates the static input scales of synthetic checkpoints (`models.synthetic`).
"""

from __future__ import annotations

import torch

from det_suite.models.checkpoint import LINEARS, NORMS, Qwen3Checkpoint, layer_prefix


def dequantized_layer(ckpt: Qwen3Checkpoint, index: int, dtype=torch.float32) -> dict:
    """Layer `index`'s parameters under their names inside the layer, in `dtype`, FP8
    weights dequantized (in fp32 whatever `dtype` is: the product is the weight's true value)."""
    layer = ckpt.layers[index]
    out = {path: getattr(layer, name).to(dtype) for name, path in NORMS}
    for name, path in LINEARS:
        linear = getattr(layer, name)
        out[f"{path}.weight"] = (linear.weight.float() * linear.weight_scale.float()).to(dtype)
        if linear.bias is not None:
            out[f"{path}.bias"] = linear.bias.to(dtype)
    return out


def _outer_state(ckpt: Qwen3Checkpoint, dtype) -> dict:
    # A tied checkpoint holds the matrix once; the reference model is built untied (below)
    # and holds it under both names, the same values.
    return {"model.embed_tokens.weight": ckpt.embed_tokens.to(dtype),
            "model.norm.weight": ckpt.norm.to(dtype), "lm_head.weight": ckpt.lm_head.to(dtype)}


def dequantized_state_dict(ckpt: Qwen3Checkpoint, dtype=torch.float32) -> dict:
    """transformers' parameter names -> tensors in `dtype`, FP8 weights dequantized."""
    out = _outer_state(ckpt, dtype)
    for i in range(len(ckpt.layers)):
        out.update({layer_prefix(i) + name: tensor
                    for name, tensor in dequantized_layer(ckpt, i, dtype).items()})
    return out


def reference_model(ckpt: Qwen3Checkpoint, *, dtype=torch.float32,
                    layer_by_layer: bool = False):
    """transformers' Qwen3ForCausalLM holding `ckpt`'s weights (dequantized) on its device.

    Built on the meta device and filled by assignment, so an 8B-shaped model never runs
    transformers' random initialisation, and its only copy of each weight is the one given.

    layer_by_layer: each decoder layer dequantizes its weights as its forward starts and
    drops them when it ends, so the model holds one layer in `dtype` at a time (a 32B
    shape is 128 GB in fp32, more than a GPU holds). The same modules run the same ops on
    the same values, so the outputs are those of the whole model held at once.
    """
    from transformers import Qwen3ForCausalLM

    config = ckpt.config.__class__.from_dict(ckpt.config.to_dict())
    # Untied whatever the checkpoint says: load_state_dict(assign=True) fills each parameter
    # from the state dict, which names an lm_head either way (dequantized_state_dict).
    config.tie_word_embeddings = False
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    if layer_by_layer:
        outer = _outer_state(ckpt, dtype)
        missing = model.load_state_dict(outer, strict=False, assign=True).missing_keys
        unfilled = [name for name in missing if not name.startswith("model.layers.")]
        if unfilled:
            raise RuntimeError(f"reference model: parameters not filled: {unfilled}")
        # Both hooks return None: a hook's return value would replace the layer's inputs
        # or output.
        def fill(module, index):
            module.load_state_dict(dequantized_layer(ckpt, index, dtype), strict=True,
                                   assign=True)

        def drop(module):
            module.to("meta")

        for index, block in enumerate(model.model.layers):
            block.register_forward_pre_hook(lambda module, _args, index=index: fill(module, index))
            block.register_forward_hook(lambda module, _args, _out: drop(module))
    else:
        model.load_state_dict(dequantized_state_dict(ckpt, dtype), strict=True, assign=True)
    # Non-persistent buffers (rotary frequencies) were made on meta: rebuild them, on the
    # CPU so that every device starts from the same frequencies.
    with torch.device("cpu"):
        model.model.rotary_emb = type(model.model.rotary_emb)(config).to(ckpt.device)
    return model.eval()


def reference_logprobs(ckpt: Qwen3Checkpoint, token_ids, *, model=None) -> torch.Tensor:
    """fp32 (len(token_ids) - 1,) on the CPU: entry t is log p(token t+1 | tokens[:t+1]).

    `model` reuses a `reference_model(ckpt)` across calls (building one dequantizes every
    weight, 32 GB in fp32 for the 8B shapes).
    """
    ids = list(token_ids)
    vocab = ckpt.config.vocab_size
    if len(ids) < 2 or not all(isinstance(t, int) and 0 <= t < vocab for t in ids):
        raise ValueError(f"token_ids: expected at least 2 ints in [0, {vocab}), got "
                         f"{ids[:8]}{'...' if len(ids) > 8 else ''} ({len(ids)} tokens)")
    model = model if model is not None else reference_model(ckpt)
    device = next(model.parameters()).device
    with torch.inference_mode():
        tokens = torch.tensor([ids], dtype=torch.long, device=device)
        logits = model(input_ids=tokens, use_cache=False).logits[0, :-1].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        picked = logprobs.gather(1, tokens[0, 1:, None])[:, 0]
    return picked.cpu()
