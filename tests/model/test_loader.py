"""The ModelOpt FP8 loader: a good checkpoint round-trips exactly; every bad one fails with a
CheckpointError naming the file and the tensor (issue 12, item 6). Model specs resolve here too."""

import json

import pytest
import torch

pytestmark = pytest.mark.model

LAYER1 = "model.layers.1."


def _shard_of(root, name):
    index = json.loads((root / "model.safetensors.index.json").read_text())
    return root / index["weight_map"][name]


def _edit_tensors(root, name, edit):
    """Rewrite the shard holding `name` with edit(tensors) applied (and the index kept
    consistent when a tensor is removed)."""
    from safetensors.torch import load_file, save_file
    shard = _shard_of(root, name)
    tensors = load_file(shard)
    edit(tensors)
    save_file(tensors, shard, metadata={"format": "pt"})
    index_path = root / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"] = {n: f for n, f in index["weight_map"].items()
                           if f != shard.name or n in tensors}
    index_path.write_text(json.dumps(index))
    return shard.name


def _edit_json(root, file, edit):
    payload = json.loads((root / file).read_text())
    edit(payload)
    (root / file).write_text(json.dumps(payload))
    return file


def _replace(name, value):
    return lambda root: _edit_tensors(root, name, lambda t: t.__setitem__(name, value(t[name])))


def _remove(name):
    """Gone from shard and index alike: the index is the file that must be named."""
    def tamper(root):
        _edit_tensors(root, name, lambda t: t.pop(name))
        return "model.safetensors.index.json"
    return tamper


def _remove_from_shard_only(name):
    """The index still lists the tensor, but its shard no longer holds it."""
    def tamper(root):
        from safetensors.torch import load_file, save_file
        shard = _shard_of(root, name)
        tensors = load_file(shard)
        tensors.pop(name)
        save_file(tensors, shard, metadata={"format": "pt"})
        return shard.name
    return tamper


def _delete_shard_holding(name):
    def tamper(root):
        shard = _shard_of(root, name)
        shard.unlink()
        return shard.name
    return tamper


def _quant(key, value):
    return lambda root: _edit_json(root, "hf_quant_config.json",
                                   lambda q: q["quantization"].__setitem__(key, value))


def _flat_quant(key, value):
    """Only config.json's flat quantization_config, with `key` set (the layout of a
    published checkpoint without hf_quant_config.json)."""
    def tamper(root):
        (root / "hf_quant_config.json").unlink()
        return _edit_json(root, "config.json",
                          lambda c: c["quantization_config"].__setitem__(key, value))
    return tamper


def _architecture(root):
    def edit(config):
        config["architectures"], config["model_type"] = ["LlamaForCausalLM"], "llama"
    return _edit_json(root, "config.json", edit)


def _delete(file):
    def tamper(root):
        (root / file).unlink()
        return file
    return tamper


def _truncate_shard_holding(name, keep):
    """Cut the shard holding `name` to `keep(size)` bytes, as an interrupted copy would."""
    def tamper(root):
        file = root / _shard_of(root, name)
        data = file.read_bytes()
        file.write_bytes(data[:keep(len(data))])
        return file.name
    return tamper


def _write_config(text):
    def tamper(root):
        (root / "config.json").write_text(text)
        return "config.json"
    return tamper


def _config_field(key, value):
    def tamper(root):
        _edit_json(root, "config.json", lambda c: c.pop(key) if value is None
                   else c.__setitem__(key, value))
        return "config.json"
    return tamper


def _delete_all_weights(root):
    for path in list(root.glob("*.safetensors")) + [root / "model.safetensors.index.json"]:
        path.unlink()
    return "model.safetensors.index.json"


Q1, O1, DOWN1, GATE1 = (f"{LAYER1}self_attn.q_proj", f"{LAYER1}self_attn.o_proj",
                        f"{LAYER1}mlp.down_proj", f"{LAYER1}mlp.gate_proj")

# (id, tamper(root) -> the file name the error must name, the tensor or key it must name,
#  a phrase saying what was wrong)
BAD = [
    ("missing-weight", _remove(f"{Q1}.weight"), f"{Q1}.weight", "missing tensor"),
    ("missing-input-scale", _remove(f"{LAYER1}self_attn.k_proj.input_scale"),
     f"{LAYER1}self_attn.k_proj.input_scale", "missing tensor"),
    ("missing-weight-scale", _remove(f"{DOWN1}.weight_scale"), f"{DOWN1}.weight_scale",
     "missing tensor"),
    ("missing-norm", _remove(f"{LAYER1}self_attn.q_norm.weight"),
     f"{LAYER1}self_attn.q_norm.weight", "missing tensor"),
    ("missing-lm-head", _remove("lm_head.weight"), "lm_head.weight", "missing tensor"),
    ("index-lists-absent-tensor", _remove_from_shard_only(f"{O1}.weight"), f"{O1}.weight",
     "the index lists it"),
    ("bf16-weight", _replace(f"{O1}.weight", lambda w: w.to(torch.bfloat16)), f"{O1}.weight",
     "expected dtype torch.float8_e4m3fn"),
    ("fp8-lm-head", _replace("lm_head.weight", lambda w: w.to(torch.float8_e4m3fn)),
     "lm_head.weight", "expected dtype torch.bfloat16"),
    ("transposed-weight", _replace(f"{DOWN1}.weight", lambda w: w.t().contiguous()),
     f"{DOWN1}.weight", "expected shape (64, 128)"),
    ("short-norm", _replace(f"{LAYER1}input_layernorm.weight", lambda w: w[:-1].clone()),
     f"{LAYER1}input_layernorm.weight", "expected shape (64,)"),
    ("per-channel-weight-scale", _replace(f"{GATE1}.weight_scale", lambda s: s.repeat(128)),
     f"{GATE1}.weight_scale", "non-scalar scale of shape (128,)"),
    ("bf16-input-scale", _replace(f"{GATE1}.input_scale", lambda s: s.to(torch.bfloat16)),
     f"{GATE1}.input_scale", "expected a float32 scale"),
    ("zero-scale", _replace(f"{GATE1}.input_scale", torch.zeros_like), f"{GATE1}.input_scale",
     "not finite and positive"),
    ("nan-scale", _replace(f"{GATE1}.weight_scale", lambda s: s * float("nan")),
     f"{GATE1}.weight_scale", "not finite and positive"),
    ("missing-shard", _delete_shard_holding(f"{DOWN1}.weight"), "model.safetensors.index.json",
     "is missing"),
    ("no-weights", _delete_all_weights, "model.safetensors", "neither"),
    ("quant-algo-nvfp4", _quant("quant_algo", "NVFP4"), "quant_algo 'NVFP4'", "unsupported"),
    ("kv-cache-int8", _quant("kv_cache_quant_algo", "INT8"), "kv_cache_quant_algo 'INT8'",
     "unsupported"),
    ("lm-head-quantized", _quant("exclude_modules", []), "exclude_modules", "lm_head"),
    ("decoder-linear-excluded", _quant("exclude_modules", ["lm_head", "*.mlp.down_proj"]),
     "model.layers.0.mlp.down_proj", "out of FP8"),
    ("kv-fp8-without-scales",
     lambda root: _quant("kv_cache_quant_algo", "FP8")(root) and "model.safetensors.index.json",
     "model.layers.0.self_attn.k_proj.k_scale", "missing tensor"),
    ("flat-ignore-disagrees", _flat_quant("ignore", []), "ignore [] and exclude_modules",
     "disagree"),
    ("architecture-llama", _architecture, "LlamaForCausalLM", "unsupported architecture"),
    ("no-config", _delete("config.json"), "config.json", "missing"),
    ("truncated-shard", _truncate_shard_holding(f"{DOWN1}.weight", lambda n: n - 100),
     "", "safetensors"),
    ("header-only-shard", _truncate_shard_holding(f"{DOWN1}.weight", lambda n: 7), "",
     "safetensors"),
    ("config-not-json", _write_config('{"architectures": ["Qwen3'), "config.json",
     "not valid JSON"),
    ("config-a-list", _write_config("[1, 2]"), "config.json", "expected a JSON object"),
    ("config-without-hidden-size", _config_field("hidden_size", None), "'hidden_size'",
     "expected a positive integer"),
    ("config-negative-layers", _config_field("num_hidden_layers", -1),
     "'num_hidden_layers'", "expected a positive integer"),
]


@pytest.mark.parametrize("tamper,names,what", [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_a_bad_checkpoint_fails_naming_file_and_tensor(sharded_copy, tamper, names, what):
    from det_suite.models.loader import CheckpointError, load_checkpoint
    file = tamper(sharded_copy)
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(sharded_copy)
    message = str(error.value)
    assert file in message and names in message and what in message, message


def test_config_json_alone_is_read_as_sglang_reads_it(sharded_copy):
    """Without hf_quant_config.json the flat form's `ignore` decides, as in SGLang."""
    from det_suite.models.loader import read_quant
    _flat_quant("exclude_modules", ["lm_head"])(sharded_copy)
    assert read_quant(sharded_copy)["exclude_modules"] == ["lm_head"]
    _edit_json(sharded_copy, "config.json",
               lambda c: c["quantization_config"].pop("exclude_modules"))
    assert read_quant(sharded_copy)["exclude_modules"] == ["lm_head"]


def test_checkpoint_error_is_a_value_error():
    from det_suite.models.loader import CheckpointError
    assert issubclass(CheckpointError, ValueError)


def test_the_untampered_copy_loads(sharded_copy):
    """Control for the cases above: the copy they tamper with is a good checkpoint."""
    from det_suite.models.loader import load_checkpoint
    assert len(load_checkpoint(sharded_copy).layers) == 2


@pytest.mark.parametrize("layout", ["single-file", "sharded"])
def test_write_then_load_round_trips_exactly(layout, tiny, tiny_dir, tiny_sharded_dir,
                                             state_bytes):
    from det_suite.models.loader import load_checkpoint
    root = tiny_dir if layout == "single-file" else tiny_sharded_dir
    assert (root / "model.safetensors.index.json").exists() == (layout == "sharded")
    loaded = load_checkpoint(root)
    expected, got = state_bytes(tiny), state_bytes(loaded)
    assert list(got) == list(expected)
    differing = [name for name in expected if got[name] != expected[name]]
    print(f"{len(expected)} tensors compared byte for byte, {len(differing)} differ")
    assert not differing
    assert loaded.config.to_dict() == tiny.config.to_dict()
    assert loaded.quant == tiny.quant
    assert loaded.tokenizer_path == str(root)


def test_the_quant_config_may_come_from_config_json_alone(sharded_copy):
    from det_suite.models.loader import load_checkpoint
    (sharded_copy / "hf_quant_config.json").unlink()
    assert load_checkpoint(sharded_copy).quant["quant_algo"] == "FP8"


def test_kv_scales_are_recorded_when_present(sharded_copy):
    from det_suite.models.loader import load_checkpoint
    name = f"{LAYER1}self_attn.v_proj.v_scale"
    _edit_tensors(sharded_copy, f"{LAYER1}self_attn.v_proj.weight",
                  lambda t: t.__setitem__(name, torch.tensor(0.25)))
    index_path = sharded_copy / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"][name] = index["weight_map"][f"{LAYER1}self_attn.v_proj.weight"]
    index_path.write_text(json.dumps(index))
    ckpt = load_checkpoint(sharded_copy)
    assert ckpt.layers[1].v_scale.item() == 0.25 and ckpt.layers[1].v_scale.dim() == 0
    assert ckpt.layers[1].k_scale is None and ckpt.layers[0].v_scale is None


def test_a_one_element_scale_is_read_as_a_scalar(sharded_copy):
    """ModelOpt's older exports store per-tensor scales with shape (1,)."""
    from det_suite.models.loader import load_checkpoint
    name = f"{GATE1}.input_scale"
    _replace(name, lambda s: s.reshape(1))(sharded_copy)
    scale = load_checkpoint(sharded_copy).layers[1].gate_proj.input_scale
    assert scale.dim() == 0


def test_a_missing_folder_is_named(tmp_path):
    from det_suite.models.loader import CheckpointError, load_checkpoint
    with pytest.raises(CheckpointError, match="nowhere: no such folder"):
        load_checkpoint(tmp_path / "nowhere")


def test_a_file_in_place_of_the_folder_is_named(tmp_path):
    from det_suite.models.loader import CheckpointError, load_checkpoint
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="model.bin: not a folder"):
        load_checkpoint(tmp_path / "model.bin")


# --- model specs -----------------------------------------------------------------------

def test_a_synthetic_spec_builds_the_preset(tiny, state_bytes):
    from det_suite.models.spec import load_model
    ckpt = load_model("synthetic:tiny?seed=0")
    assert ckpt.source == "synthetic:tiny?seed=0"
    assert state_bytes(ckpt) == state_bytes(tiny)


def test_a_local_path_spec_loads_the_folder(tiny_dir):
    from det_suite.models.spec import load_model
    assert load_model(str(tiny_dir)).source == str(tiny_dir)


def test_a_hub_id_spec_loads_the_snapshot(tiny_dir, monkeypatch):
    from det_suite.models import spec
    monkeypatch.setattr(spec, "hub_snapshot", lambda repo_id: tiny_dir)
    assert spec.load_model("nvidia/Qwen3-8B-FP8").source == "nvidia/Qwen3-8B-FP8"


@pytest.mark.parametrize("bad", ["synthetic:huge?seed=0", "synthetic:tiny?seed=-1",
                                 "synthetic:tiny?seed=x", "synthetic:tiny?sead=1",
                                 "./no/such/folder", ""],
                         ids=["unknown-preset", "negative-seed", "text-seed", "unknown-key",
                              "missing-path", "empty"])
def test_a_bad_spec_is_refused_with_what_was_expected(bad):
    from det_suite.models.spec import load_model
    with pytest.raises(ValueError, match="model spec"):
        load_model(bad)
