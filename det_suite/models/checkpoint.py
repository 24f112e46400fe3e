"""A Qwen3 dense ModelOpt FP8 checkpoint in memory: what the loader returns, the synthetic
builder makes and the engine runs.

The seven decoder linears stay separate, exactly as the checkpoint stores them: each has its
own per-tensor weight scale, and merging two different scales into one would round weights.
Fusing q/k/v or gate/up is the engine's decision, made where it can keep each scale exact.

`state_dict()` maps fields to the tensor names of the ModelOpt export
(`model.layers.{i}.self_attn.q_proj.weight`, `...weight_scale`, `...input_scale`, k/v
scales on `k_proj.k_scale` / `v_proj.v_scale`), the one place those names are written.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

from det_suite.models.synthetic_linear import Fp8Linear

# Decoder linears: (field on Qwen3Layer, module path inside model.layers.{i}).
LINEARS = (
    ("q_proj", "self_attn.q_proj"), ("k_proj", "self_attn.k_proj"),
    ("v_proj", "self_attn.v_proj"), ("o_proj", "self_attn.o_proj"),
    ("gate_proj", "mlp.gate_proj"), ("up_proj", "mlp.up_proj"),
    ("down_proj", "mlp.down_proj"),
)
# Norm weights: (field on Qwen3Layer, tensor path inside model.layers.{i}).
NORMS = (
    ("input_layernorm", "input_layernorm.weight"),
    ("post_attention_layernorm", "post_attention_layernorm.weight"),
    ("q_norm", "self_attn.q_norm.weight"), ("k_norm", "self_attn.k_norm.weight"),
)
# KV-cache scales, where ModelOpt exports them.
KV_SCALES = (("k_scale", "self_attn.k_proj.k_scale"), ("v_scale", "self_attn.v_proj.v_scale"))


def layer_prefix(index: int) -> str:
    return f"model.layers.{index}."


def linear_shapes(config) -> dict[str, tuple[int, int]]:
    """(N, K) of each decoder linear, from a Qwen3Config."""
    hidden, inter = config.hidden_size, config.intermediate_size
    q = config.num_attention_heads * config.head_dim
    kv = config.num_key_value_heads * config.head_dim
    return {"q_proj": (q, hidden), "k_proj": (kv, hidden), "v_proj": (kv, hidden),
            "o_proj": (hidden, q), "gate_proj": (inter, hidden), "up_proj": (inter, hidden),
            "down_proj": (hidden, inter)}


def _move(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, Fp8Linear):
        return Fp8Linear(*(_move(part, device) for part in value.args()))
    return value


@dataclass
class Qwen3Layer:
    input_layernorm: torch.Tensor           # (H,) bf16
    post_attention_layernorm: torch.Tensor  # (H,) bf16
    q_norm: torch.Tensor                    # (head_dim,) bf16
    k_norm: torch.Tensor                    # (head_dim,) bf16
    q_proj: Fp8Linear
    k_proj: Fp8Linear
    v_proj: Fp8Linear
    o_proj: Fp8Linear
    gate_proj: Fp8Linear
    up_proj: Fp8Linear
    down_proj: Fp8Linear
    k_scale: torch.Tensor | None = None     # float32 0-dim, FP8 KV cache only
    v_scale: torch.Tensor | None = None

    def to(self, device) -> "Qwen3Layer":
        return Qwen3Layer(**{f.name: _move(getattr(self, f.name), device) for f in fields(self)})

    def linears(self) -> dict[str, Fp8Linear]:
        return {name: getattr(self, name) for name, _ in LINEARS}


@dataclass
class Qwen3Checkpoint:
    config: object                 # transformers.Qwen3Config
    embed_tokens: torch.Tensor     # (V, H) bf16
    layers: list[Qwen3Layer]
    norm: torch.Tensor             # (H,) bf16
    lm_head: torch.Tensor          # (V, H) bf16, excluded from quantization
    quant: dict = field(default_factory=dict)  # quant_algo, kv_cache_quant_algo, exclude_modules
    source: str = ""               # path, hub id or "synthetic:<preset>?seed=S"
    tokenizer_path: str | None = None

    def to(self, device) -> "Qwen3Checkpoint":
        embed = self.embed_tokens.to(device)
        return replace(self, embed_tokens=embed,
                       layers=[layer.to(device) for layer in self.layers],
                       norm=self.norm.to(device),
                       lm_head=embed if self.tied else self.lm_head.to(device))

    @property
    def tied(self) -> bool:
        """The lm_head is the embedding matrix itself (config.tie_word_embeddings)."""
        return self.lm_head is self.embed_tokens

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.device

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor under its ModelOpt export name (what write and load round-trip); a
        tied lm_head only under the embedding's name, as tied checkpoints are published."""
        out = {"model.embed_tokens.weight": self.embed_tokens}
        for i, layer in enumerate(self.layers):
            prefix = layer_prefix(i)
            for name, path in NORMS:
                out[prefix + path] = getattr(layer, name)
            for name, path in LINEARS:
                linear = getattr(layer, name)
                out[f"{prefix}{path}.weight"] = linear.weight
                out[f"{prefix}{path}.weight_scale"] = linear.weight_scale
                out[f"{prefix}{path}.input_scale"] = linear.input_scale
                if linear.bias is not None:
                    out[f"{prefix}{path}.bias"] = linear.bias
            for name, path in KV_SCALES:
                if getattr(layer, name) is not None:
                    out[prefix + path] = getattr(layer, name)
        out["model.norm.weight"] = self.norm
        if not self.tied:   # a tied checkpoint stores the matrix once, as the embedding
            out["lm_head.weight"] = self.lm_head
        return out


QUANT_PRODUCER = {"name": "det-suite", "version": "0.1.0"}
DEFAULT_SHARD_BYTES = 5 * 2 ** 30   # what transformers' save_pretrained uses


def config_dict(ckpt: Qwen3Checkpoint) -> dict:
    """config.json's contents: the Qwen3 config plus its `quantization_config`, with both
    the current (`rope_parameters`, `dtype`) and the older (`rope_theta`, `torch_dtype`) keys
    so any transformers release reads it; no library version, so the bytes are the same
    wherever it is written."""
    out = ckpt.config.to_diff_dict()
    out.pop("transformers_version", None)
    out["architectures"] = ["Qwen3ForCausalLM"]
    out["dtype"] = out["torch_dtype"] = "bfloat16"
    rope = getattr(ckpt.config, "rope_parameters", None) or {}
    out["rope_theta"] = rope.get("rope_theta", getattr(ckpt.config, "rope_theta", None))
    # SGLang prefers config.json's quantization_config and, in this flat form, reads only
    # `ignore` (ModelOptFp8Config.from_config, 0.5.23); hf_quant_config.json's nested form
    # reads `exclude_modules`. Both keys, same list: lm_head stays BF16 whichever is read.
    out["quantization_config"] = {"quant_method": "modelopt", **ckpt.quant,
                                  "ignore": list(ckpt.quant.get("exclude_modules") or [])}
    return out


def shard_plan(tensors: dict[str, torch.Tensor], max_shard_bytes: int) -> list[list[str]]:
    """Tensor names grouped into shards of at most max_shard_bytes (a larger tensor alone)."""
    shards, size = [[]], 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def save_checkpoint(ckpt: Qwen3Checkpoint, out_dir, *,
                    max_shard_bytes: int = DEFAULT_SHARD_BYTES):
    """Write `ckpt` in the ModelOpt FP8 layout: config.json, hf_quant_config.json and
    model.safetensors (or model-0000i-of-0000n.safetensors + model.safetensors.index.json).
    Every file is written atomically; returns the folder as a Path."""
    import json
    from pathlib import Path

    from safetensors.torch import save

    from det_suite.reports.files import write_bytes_atomic, write_text_atomic

    if max_shard_bytes <= 0:
        raise ValueError(f"max_shard_bytes: expected a positive byte count, got {max_shard_bytes}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump = lambda payload: json.dumps(payload, indent=2, sort_keys=True) + "\n"  # noqa: E731
    write_text_atomic(out / "config.json", dump(config_dict(ckpt)))
    write_text_atomic(out / "hf_quant_config.json",
                      dump({"producer": QUANT_PRODUCER, "quantization": ckpt.quant}))
    tensors = ckpt.state_dict()
    shards = shard_plan(tensors, max_shard_bytes)
    files = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)])
    for file, names in zip(files, shards):
        payload = {name: tensors[name].detach().to("cpu").contiguous() for name in names}
        write_bytes_atomic(out / file, save(payload, metadata={"format": "pt"}))
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        weight_map = {name: file for file, names in zip(files, shards) for name in names}
        write_text_atomic(out / "model.safetensors.index.json",
                          dump({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return out
