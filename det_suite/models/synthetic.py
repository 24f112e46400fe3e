"""Synthetic Qwen3 ModelOpt FP8 checkpoints: random weights scaled like a trained model's,
static input scales calibrated from a short forward pass, the real file layout.

Same seed, same bytes, on any machine and any device. torch's random generators are not
that (CUDA's Philox streams depend on the launch grid, hence on the GPU's SM count), so
every value comes from an integer hash of (seed, tensor name, element index) computed with
exact int64 tensor ops, then turned into a float with exactly rounded fp32 steps. The hash
runs on the target device, so `synthetic:qwen3-8b` builds straight onto a GPU in seconds
without writing a file.

Calibration follows ModelOpt: each linear's input_scale = amax(its input over a short
forward) / 448, with the amax rounded up to 4 significant bits so that last-bit differences
between devices' fp32 matmuls cannot change a scale.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from det_suite.kernels.fp8_constants import FP8_E4M3_MAX
from det_suite.models import catalog
from det_suite.models.checkpoint import (LINEARS, NORMS, Qwen3Checkpoint, Qwen3Layer,
                                         layer_prefix, linear_shapes, save_checkpoint)
from det_suite.models.synthetic_linear import Fp8Linear

QUANT = {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}
_MASK32 = 0xFFFFFFFF
_CHUNK = 1 << 24      # elements hashed at once: bounds the int64 temporaries on any device


@dataclass(frozen=True)
class Preset:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int | None            # None: the synthetic tokenizer's size
    calibration_tokens: int      # length of the calibration prompt
    tied: bool = False           # lm_head is the embedding (Qwen3-0.6B/1.7B/4B ship this way)

    def parameters(self) -> int:
        """How many numbers the checkpoint holds (scales aside)."""
        vocab = self.vocab or 300   # the synthetic tokenizer's few hundred tokens
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        linears = (q + 2 * kv) * self.hidden + self.hidden * q + 3 * self.hidden * self.intermediate
        norms = 2 * self.hidden + 2 * self.head_dim
        return (vocab * self.hidden * (1 if self.tied else 2) + self.hidden
                + self.layers * (linears + norms))

    def config(self):
        from transformers import Qwen3Config

        from det_suite.models import tokenizer

        specials = tokenizer.special_token_ids()
        return Qwen3Config(
            vocab_size=self.vocab or tokenizer.vocab_size(), hidden_size=self.hidden,
            intermediate_size=self.intermediate, num_hidden_layers=self.layers,
            num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            head_dim=self.head_dim, rope_theta=1e6, rms_norm_eps=1e-6,
            max_position_embeddings=40960, tie_word_embeddings=self.tied,
            architectures=["Qwen3ForCausalLM"], dtype="bfloat16", bos_token_id=None,
            eos_token_id=specials[tokenizer.IM_END], pad_token_id=specials[tokenizer.ENDOFTEXT])


def _published(name: str, layers: int, *, tied: bool = False) -> Preset:
    """A published Qwen3's shapes: the catalog's dimensions plus its config's layer count
    and embedding tying."""
    dims = catalog.model_dims(name)
    return Preset(name, hidden=dims.hidden, layers=layers, heads=dims.heads,
                  kv_heads=dims.kv_heads, head_dim=dims.head_dim,
                  intermediate=dims.intermediate, vocab=151936, calibration_tokens=48,
                  tied=tied)


PRESETS: dict[str, Preset] = {
    "tiny": Preset("tiny", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                   intermediate=128, vocab=None, calibration_tokens=32),
    # tiny with 64-wide heads: q/k/v widths (256, 128, 128) end on every tile's BLOCK_N, so
    # the det engine stacks q/k/v too (tiny's 16-wide heads leave them separate).
    "tiny-wide": Preset("tiny-wide", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=64,
                        intermediate=128, vocab=None, calibration_tokens=32),
    # tiny with the embedding as its lm_head: the small Qwen3s' layout, on a CPU.
    "tiny-tied": Preset("tiny-tied", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                        intermediate=128, vocab=None, calibration_tokens=32, tied=True),
    "qwen3-4b": _published("qwen3-4b", 36, tied=True),
    "qwen3-8b": _published("qwen3-8b", 36),
    "qwen3-14b": _published("qwen3-14b", 40),
    "qwen3-32b": _published("qwen3-32b", 64),
}


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"preset: expected one of {', '.join(PRESETS)}, got {name!r}") from None


def _keys(seed: int, name: str) -> tuple[int, ...]:
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 32, 4))


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser on int64 tensors holding values < 2**32 (every product
    stays below 2**59, so nothing overflows and every device computes the same integers)."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    return (x >> 16) ^ x


def _hashed(numel: int, seed: int, name: str, device, combine) -> torch.Tensor:
    """combine(index, keys) over every element index, chunked; a pure function of its inputs."""
    if numel >= 1 << 32:
        raise ValueError(f"{name}: {numel} elements; the hash indexes at most 2**32")
    keys = _keys(seed, name)
    out = torch.empty(numel, dtype=torch.float32, device=device)
    for start in range(0, numel, _CHUNK):
        index = torch.arange(start, min(start + _CHUNK, numel), dtype=torch.int64,
                             device=device)
        out[start:start + index.numel()] = combine(index, keys)
    return out


def _bits(index: torch.Tensor, k_in: int, k_out: int) -> torch.Tensor:
    return _mix32(_mix32(index ^ k_in) ^ k_out)


def uniform(shape, seed: int, name: str, device) -> torch.Tensor:
    """fp32 values in [-1, 1), a pure function of (seed, name, element index)."""
    def combine(index, keys):
        top24 = _bits(index, keys[0], keys[1]) >> 8          # exact in fp32
        return top24.float() * 2.0 ** -23 - 1.0
    return _hashed(math.prod(shape), seed, name, device, combine).reshape(shape)


def bell(shape, seed: int, name: str, device) -> torch.Tensor:
    """Bell-shaped fp32 values of mean 0 and std 1 (the sum of four 16-bit uniforms, added
    as integers, so exact), bounded by +-2*sqrt(3): weights whose amax varies from tensor to
    tensor as a trained model's does, where a uniform's amax would be nearly the same."""
    def combine(index, keys):
        a, b = _bits(index, keys[0], keys[1]), _bits(index, keys[2], keys[3])
        total = (a & 0xFFFF) + (a >> 16) + (b & 0xFFFF) + (b >> 16) - 2 * 0xFFFF
        return total.float() * (math.sqrt(3.0) / 65536.0)
    return _hashed(math.prod(shape), seed, name, device, combine).reshape(shape)


def _gain(seed: int, name: str) -> float:
    """A per-tensor factor in [0.75, 1.25), so per-tensor scales differ as trained ones do."""
    return 0.75 + 0.5 * _keys(seed, name)[4] / 2.0 ** 32


def _with_std(shape, std: float, seed: int, name: str, device) -> torch.Tensor:
    return bell(shape, seed, name, device) * (std * _gain(seed, name))


def _fp8_linear(n: int, k: int, seed: int, name: str, device) -> Fp8Linear:
    w = _with_std((n, k), k ** -0.5, seed, name, device).to(torch.bfloat16).float()
    # Divided on the CPU: CUDA's tensor / Python-scalar multiplies by the reciprocal, which
    # is not the correctly rounded quotient, and the same seed must give the same bytes.
    weight_scale = (w.abs().amax().cpu() / FP8_E4M3_MAX).to(device)
    weight = (w / weight_scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    # input_scale is a placeholder until calibrate() measures the activations.
    return Fp8Linear(weight=weight, weight_scale=weight_scale.reshape(()),
                     input_scale=torch.ones((), dtype=torch.float32, device=device), bias=None)


def _norm(size: int, seed: int, name: str, device) -> torch.Tensor:
    return (1.0 + 0.1 * uniform((size,), seed, name, device)).to(torch.bfloat16)


def _random_checkpoint(p: Preset, seed: int, device) -> Qwen3Checkpoint:
    config = p.config()
    shapes = linear_shapes(config)
    layers = []
    for i in range(p.layers):
        prefix = layer_prefix(i)
        norms = {field_name: _norm(p.head_dim if field_name in ("q_norm", "k_norm") else p.hidden,
                                   seed, prefix + path, device)
                 for field_name, path in NORMS}
        linears = {field_name: _fp8_linear(*shapes[field_name], seed, f"{prefix}{path}.weight",
                                           device)
                   for field_name, path in LINEARS}
        layers.append(Qwen3Layer(**norms, **linears))
    vocab = config.vocab_size
    # Logits of std ~2 over the vocabulary: peaked enough that greedy picks are not ties.
    # A tied model's one matrix gets the lm_head's scale (the first norm rescales the rows).
    lm_head = _with_std((vocab, p.hidden), 2.0 * p.hidden ** -0.5, seed,
                        "model.embed_tokens.weight" if p.tied else "lm_head.weight",
                        device).to(torch.bfloat16)
    embed = lm_head if p.tied else _with_std((vocab, p.hidden), 1.0, seed,
                                             "model.embed_tokens.weight",
                                             device).to(torch.bfloat16)
    return Qwen3Checkpoint(config=config, embed_tokens=embed, layers=layers,
                           norm=_norm(p.hidden, seed, "model.norm.weight", device),
                           lm_head=lm_head, quant=dict(QUANT),
                           source=f"synthetic:{p.name}?seed={seed}")


def calibration_ids(p: Preset, seed: int, vocab: int) -> list[int]:
    """The calibration prompt: token ids drawn by the same hash (no tokenizer text needed)."""
    draws = uniform((p.calibration_tokens,), seed, "calibration", "cpu")
    return [min(int((v + 1.0) * 0.5 * vocab), vocab - 1) for v in draws.tolist()]


def round_up_amax(amax: float) -> float:
    """amax rounded up to 4 significant bits (why: see the module docstring)."""
    if not math.isfinite(amax) or amax <= 0:
        raise ValueError(f"calibration amax must be finite and positive, got {amax}")
    mantissa, exponent = math.frexp(amax)            # amax = mantissa * 2**exponent
    return math.ldexp(math.ceil(mantissa * 16) / 16, exponent)


def calibrate(ckpt: Qwen3Checkpoint, token_ids: list[int]) -> Qwen3Checkpoint:
    """Set every linear's input_scale from the amax of its input on `token_ids`, run through
    the fp32 dequantized reference forward (as ModelOpt's max calibration does)."""
    from det_suite.models.reference import reference_model

    # One layer in fp32 at a time: a 32B shape's whole fp32 model would not fit a GPU.
    model = reference_model(ckpt, layer_by_layer=True)
    amax: dict[tuple[int, str], float] = {}
    hooks = []
    for i, block in enumerate(model.model.layers):
        for field_name, path in LINEARS:
            module = block.get_submodule(path)

            def record(_module, args, key=(i, field_name)):
                amax[key] = max(amax.get(key, 0.0), args[0].detach().abs().amax().item())
            hooks.append(module.register_forward_pre_hook(record))
    with torch.inference_mode():
        model(input_ids=torch.tensor([token_ids], device=ckpt.device), use_cache=False)
    for hook in hooks:
        hook.remove()
    del model
    for i, layer in enumerate(ckpt.layers):
        for field_name, _ in LINEARS:
            old = getattr(layer, field_name)
            scale = torch.tensor(round_up_amax(amax[(i, field_name)]) / FP8_E4M3_MAX,
                                 dtype=torch.float32, device=ckpt.device)
            setattr(layer, field_name, Fp8Linear(old.weight, old.weight_scale, scale, old.bias))
    return ckpt


def build_synthetic(preset_name: str, seed: int, *, device="cpu",
                    progress=None) -> Qwen3Checkpoint:
    """A calibrated synthetic checkpoint built in memory on `device` (no files written).
    `progress(line)`, when given, hears each step."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 63:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    say = progress or (lambda line: None)
    p = preset(preset_name)
    say(f"random weights for {p.layers} layers on {device}")
    ckpt = _random_checkpoint(p, seed, torch.device(device))
    say("calibrating input scales (a short forward pass)")
    return calibrate(ckpt, calibration_ids(p, seed, ckpt.config.vocab_size))


def write_synthetic(preset_name: str, seed: int, out_dir, *, device="cpu",
                    max_shard_bytes: int | None = None, progress=None) -> Path:
    """Build and write a synthetic checkpoint (ModelOpt layout + tokenizer) into out_dir."""
    from det_suite.models.checkpoint import DEFAULT_SHARD_BYTES
    from det_suite.models.tokenizer import build_tokenizer

    ckpt = build_synthetic(preset_name, seed, device=device, progress=progress)
    if progress:
        progress("writing config, safetensors and tokenizer")
    out = save_checkpoint(ckpt, out_dir, max_shard_bytes=max_shard_bytes or DEFAULT_SHARD_BYTES)
    build_tokenizer(out)
    return out
