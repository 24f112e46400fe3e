"""Load a Qwen3 dense ModelOpt static FP8 checkpoint (the `nvidia/Qwen3-8B-FP8` layout):
config.json, hf_quant_config.json (or config.json's `quantization_config`), and
model.safetensors or shards listed in model.safetensors.index.json.

Every decoder linear must be FP8 with a float32 per-tensor `weight_scale` and
`input_scale`; the lm_head, embeddings and norms stay BF16. Anything else is refused with a
CheckpointError naming the file and the tensor, never loaded half-right.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
from pathlib import Path

import torch
from safetensors import SafetensorError

from det_suite.errors import InputError
from det_suite.models.checkpoint import (KV_SCALES, LINEARS, NORMS, Qwen3Checkpoint,
                                         Qwen3Layer, layer_prefix, linear_shapes)
from det_suite.models.synthetic_linear import Fp8Linear

ARCHITECTURE = "Qwen3ForCausalLM"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
# Attention projections that carry a bias when config.attention_bias is set (Qwen3 default off).
BIASED = ("q_proj", "k_proj", "v_proj", "o_proj")


# config.json fields the model is built from: each must be present and a positive integer.
REQUIRED_INT_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                       "num_attention_heads", "num_key_value_heads")


class CheckpointError(InputError):
    """The checkpoint is not one det-suite can run; the message names the file and tensor.
    An InputError: the CLI answers it with one line and exit 2."""


def _read_json(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing (expected in a ModelOpt FP8 checkpoint)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    return raw


def read_config(root: Path):
    """config.json as a transformers Qwen3Config (its quantization_config removed: the
    checkpoint's quant dict holds that), after checking the architecture."""
    from transformers import Qwen3Config

    path = root / "config.json"
    raw = _read_json(path)
    architectures = raw.get("architectures") or []
    if ARCHITECTURE not in architectures or raw.get("model_type") != "qwen3":
        raise CheckpointError(
            f"{path}: unsupported architecture {architectures} (model_type "
            f"{raw.get('model_type')!r}); expected ['{ARCHITECTURE}'], model_type 'qwen3'")
    bad = [name for name in REQUIRED_INT_FIELDS
           if not isinstance(raw.get(name), int) or isinstance(raw.get(name), bool)
           or raw[name] <= 0]
    if bad:
        raise CheckpointError(f"{path}: field {bad[0]!r} is {raw.get(bad[0])!r}; expected a "
                              "positive integer")
    raw = {key: value for key, value in raw.items() if key != "quantization_config"}
    try:
        return Qwen3Config.from_dict(raw)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a valid Qwen3 config ({exc})") from None


def read_quant(root: Path) -> dict:
    """quant_algo / kv_cache_quant_algo / exclude_modules from hf_quant_config.json, or from
    config.json's ModelOpt `quantization_config` when only that is present."""
    path = root / "hf_quant_config.json"
    if path.exists():
        quant = _read_json(path).get("quantization")
        if not isinstance(quant, dict):
            raise CheckpointError(f"{path}: no 'quantization' section")
    else:
        path = root / "config.json"
        quant = _read_json(path).get("quantization_config")
        if not isinstance(quant, dict) or quant.get("quant_method") != "modelopt":
            raise CheckpointError(
                f"{root}: not a ModelOpt FP8 checkpoint (no hf_quant_config.json and no "
                "quantization_config with quant_method 'modelopt' in config.json)")
    algo, kv_algo = quant.get("quant_algo"), quant.get("kv_cache_quant_algo")
    if algo != "FP8":
        raise CheckpointError(f"{path}: unsupported quant_algo {algo!r}; expected 'FP8' "
                              "(ModelOpt static per-tensor FP8)")
    if kv_algo not in (None, "FP8"):
        raise CheckpointError(f"{path}: unsupported kv_cache_quant_algo {kv_algo!r}; "
                              "expected null or 'FP8'")
    excluded = list(quant.get("exclude_modules") or [])
    if path.name == "config.json" and "ignore" in quant:
        # The flat form's `ignore` is what SGLang reads; both engines must load the same
        # model, so a file that says two things is refused rather than read two ways.
        ignore = list(quant.get("ignore") or [])
        if "exclude_modules" in quant and ignore != excluded:
            raise CheckpointError(f"{path}: quantization_config's ignore {ignore} and "
                                  f"exclude_modules {excluded} disagree (SGLang reads ignore, "
                                  "the nested hf_quant_config.json form exclude_modules)")
        excluded = ignore
    if not any(fnmatch.fnmatch("lm_head", pattern) for pattern in excluded):
        raise CheckpointError(f"{path}: exclude_modules {excluded} does not keep lm_head in "
                              "BF16; det-suite runs a BF16 lm_head")
    return {"quant_algo": algo, "kv_cache_quant_algo": kv_algo, "exclude_modules": excluded}


class TensorFiles:
    """Tensor name -> the safetensors file holding it; reads tensors onto a device."""

    def __init__(self, root: Path, device, stack: contextlib.ExitStack):
        from safetensors import safe_open

        def open_file(file: Path):
            # safe_open reads and checks the header: a truncated or garbled file fails here.
            try:
                return stack.enter_context(
                    safe_open(str(file), framework="pt", device=str(device)))
            except SafetensorError as exc:
                raise CheckpointError(f"{file}: not a readable safetensors file ({exc}); "
                                      "expected a complete file, as exported") from None

        self._open = open_file
        self._handles: dict[Path, object] = {}
        self._keys: dict[Path, set[str]] = {}
        index = root / INDEX_FILE
        if index.exists():
            weight_map = _read_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError(f"{index}: no 'weight_map'")
            self.listing = index       # the file that says which tensors exist
            self.where = {name: root / file for name, file in weight_map.items()}
            for file in sorted(set(self.where.values())):
                if not file.exists():
                    held = sorted(n for n, f in self.where.items() if f == file)
                    raise CheckpointError(
                        f"{file}: shard listed in {index.name} is missing (it holds tensor "
                        f"{held[0]} and {len(held) - 1} more)")
        elif (root / SINGLE_FILE).exists():
            file = self.listing = root / SINGLE_FILE
            self.where = dict.fromkeys(self._handle(file).keys(), file)
        else:
            raise CheckpointError(f"{root}: neither {SINGLE_FILE} nor {INDEX_FILE} found")

    def _handle(self, file: Path):
        if file not in self._handles:
            self._handles[file] = self._open(file)
        return self._handles[file]

    def has(self, name: str) -> bool:
        return name in self.where

    def _read(self, name: str) -> torch.Tensor:
        if name not in self.where:
            raise CheckpointError(f"{self.listing}: missing tensor {name}")
        handle = self._handle(self.where[name])
        if name not in self._keys.setdefault(self.where[name], set(handle.keys())):
            raise CheckpointError(f"{self.where[name]}: missing tensor {name} (the index "
                                  "lists it in this file)")
        try:
            return handle.get_tensor(name)
        except SafetensorError as exc:  # the header promises more bytes than the file holds
            raise CheckpointError(f"{self.where[name]}: tensor {name} cannot be read ({exc}); "
                                  "the file looks truncated") from None

    def get(self, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        tensor = self._read(name)
        if tensor.dtype != dtype:
            raise CheckpointError(f"{self.where[name]}: tensor {name}: expected dtype {dtype}, "
                                  f"got {tensor.dtype}")
        if tuple(tensor.shape) != tuple(shape):
            raise CheckpointError(f"{self.where[name]}: tensor {name}: expected shape "
                                  f"{tuple(shape)}, got {tuple(tensor.shape)}")
        return tensor

    def scale(self, name: str) -> torch.Tensor:
        """A per-tensor float32 scale: one element (0-dim, or ModelOpt's older shape (1,)),
        finite and positive; returned 0-dim."""
        tensor = self._read(name)
        where = f"{self.where[name]}: tensor {name}"
        if tensor.dtype != torch.float32:
            raise CheckpointError(f"{where}: expected a float32 scale, got {tensor.dtype}")
        if tensor.numel() != 1:
            raise CheckpointError(f"{where}: non-scalar scale of shape {tuple(tensor.shape)}; "
                                  "expected one per-tensor value (static per-tensor FP8)")
        value = tensor.reshape(())
        if not bool(torch.isfinite(value)) or not bool(value > 0):
            raise CheckpointError(f"{where}: scale {value.item()} is not finite and positive")
        return value


def _linear(files: TensorFiles, name: str, n: int, k: int, biased: bool) -> Fp8Linear:
    return Fp8Linear(
        weight=files.get(f"{name}.weight", torch.float8_e4m3fn, (n, k)),
        weight_scale=files.scale(f"{name}.weight_scale"),
        input_scale=files.scale(f"{name}.input_scale"),
        bias=files.get(f"{name}.bias", torch.bfloat16, (n,)) if biased else None)


def _check_quantized(quant: dict, config) -> None:
    for i in range(config.num_hidden_layers):
        for _, path in LINEARS:
            module = f"{layer_prefix(i)}{path}"
            hits = [p for p in quant["exclude_modules"] if fnmatch.fnmatch(module, p)]
            if hits:
                raise CheckpointError(
                    f"hf_quant_config.json: exclude_modules {hits} keeps {module} out of FP8; "
                    "det-suite's Qwen3 runs every decoder linear in FP8")


def _layer(files: TensorFiles, config, index: int, kv_fp8: bool) -> Qwen3Layer:
    prefix = layer_prefix(index)
    hidden, head_dim = config.hidden_size, config.head_dim
    norms = {name: files.get(prefix + path, torch.bfloat16,
                             (head_dim,) if name in ("q_norm", "k_norm") else (hidden,))
             for name, path in NORMS}
    shapes = linear_shapes(config)
    biased = bool(getattr(config, "attention_bias", False))
    linears = {name: _linear(files, prefix + path, *shapes[name], biased and name in BIASED)
               for name, path in LINEARS}
    kv = {name: files.scale(prefix + path) if kv_fp8 or files.has(prefix + path) else None
          for name, path in KV_SCALES}
    return Qwen3Layer(**norms, **linears, **kv)


def load_checkpoint(path, *, device="cpu") -> Qwen3Checkpoint:
    """Read and validate a ModelOpt FP8 Qwen3 checkpoint folder onto `device`."""
    root = Path(path)
    if not root.exists():
        raise CheckpointError(f"{root}: no such folder (expected a checkpoint folder with "
                              "config.json, hf_quant_config.json and safetensors)")
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a folder (expected a checkpoint folder with "
                              "config.json, hf_quant_config.json and safetensors)")
    config = read_config(root)
    quant = read_quant(root)
    _check_quantized(quant, config)
    vocab, hidden = config.vocab_size, config.hidden_size
    with contextlib.ExitStack() as stack:
        files = TensorFiles(root, device, stack)
        embed = files.get("model.embed_tokens.weight", torch.bfloat16, (vocab, hidden))
        layers = [_layer(files, config, i, quant["kv_cache_quant_algo"] == "FP8")
                  for i in range(config.num_hidden_layers)]
        norm = files.get("model.norm.weight", torch.bfloat16, (hidden,))
        if config.tie_word_embeddings and not files.has("lm_head.weight"):
            lm_head = embed
        else:
            lm_head = files.get("lm_head.weight", torch.bfloat16, (vocab, hidden))
    has_tokenizer = (root / "tokenizer.json").exists() or (root / "tokenizer_config.json").exists()
    return Qwen3Checkpoint(config=config, embed_tokens=embed, layers=layers, norm=norm,
                           lm_head=lm_head, quant=quant, source=str(root),
                           tokenizer_path=str(root) if has_tokenizer else None)
