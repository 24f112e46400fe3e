"""det-suite's SGLang plugin against a fake `sglang` module tree (a hook registry that wraps
targets the way SGLang's does, a ModelOpt FP8 linear method whose `apply` is the upstream
path, a runtime context holding the deterministic flag): which targets it hooks, that
deterministic mode returns exactly what `fp8_linear` returns for the same tensors, what
falls through to upstream and why, the self-check that its hook is live, and loud failure
when SGLang has drifted. The same checks against the real SGLang carry the `sglang` marker.
"""

import enum
import functools
import logging
import pkgutil
import sys
import types

import pytest
import torch

from det_suite.backends.sglang import plugin
from det_suite.models.synthetic_linear import make_activations, make_fp8_linear
from det_suite.ops import fp8_linear
from det_suite.ops.dispatch import OTHER_ARCH_ENV, Fp8Route
from det_suite.platform.family import ARCH_OVERRIDE_ENV
from tests.unit.backends import real_sglang

FAKE_VERSION = "9.9.9-fake"
N, K, M = 16, 32, 3


# -- the fake sglang tree ----------------------------------------------------------------------

class HookType(enum.Enum):
    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


def make_registry():
    class HookRegistry:
        hooks: list = []

        @classmethod
        def register(cls, target, hook, hook_type=HookType.AFTER, *, source=None):
            cls.hooks.append((target, hook, hook_type))

        @classmethod
        def apply_hooks(cls, only=None):
            for target, hook, hook_type in cls.hooks:
                if only is not None and target != only:
                    continue
                owner_path, attr = target.rsplit(".", 1)
                owner = pkgutil.resolve_name(owner_path)
                original = getattr(owner, attr)
                if hook_type is HookType.AROUND:
                    def wrapper(*a, _hook=hook, _original=original, **kw):
                        return _hook(_original, *a, **kw)
                elif hook_type is HookType.AFTER:
                    def wrapper(*a, _hook=hook, _original=original, **kw):
                        result = _original(*a, **kw)
                        changed = _hook(result, *a, **kw)
                        return result if changed is None else changed
                else:
                    raise AssertionError(f"the plugin registered a {hook_type} hook")
                setattr(owner, attr, functools.wraps(original)(wrapper))
    return HookRegistry


def make_method_class():
    class ModelOptFp8LinearMethod:
        upstream_calls: list = []

        def __init__(self, use_marlin=False):
            self.use_marlin = use_marlin

        def process_weights_after_loading(self, layer):
            # What SGLang leaves for a per-tensor checkpoint: the (K, N) view of the [N, K]
            # weight and scalar scales.
            layer.weight = torch.nn.Parameter(layer.weight.data.t(), requires_grad=False)

        def apply(self, layer, x, bias=None):
            type(self).upstream_calls.append((self, layer, x, bias))
            return torch.full((x.shape[0], layer.weight.shape[1]), -7.0, dtype=x.dtype,
                              device=x.device)
    return ModelOptFp8LinearMethod


class FakeSGLang(types.SimpleNamespace):
    def install(self, monkeypatch):
        for name, module in self.modules.items():
            monkeypatch.setitem(sys.modules, name, module)


def build_fake(deterministic=True):
    names = ["sglang", "sglang.srt", "sglang.srt.plugins", "sglang.srt.plugins.hook_registry",
             "sglang.srt.layers", "sglang.srt.layers.quantization",
             "sglang.srt.layers.quantization.modelopt_quant", "sglang.srt.runtime_context"]
    modules = {name: types.ModuleType(name) for name in names}
    for name in names[1:]:
        parent, _, child = name.rpartition(".")
        setattr(modules[parent], child, modules[name])
    modules["sglang"].__version__ = FAKE_VERSION
    registry = make_registry()
    modules["sglang.srt.plugins.hook_registry"].HookRegistry = registry
    modules["sglang.srt.plugins.hook_registry"].HookType = HookType
    method_class = make_method_class()
    modules["sglang.srt.layers.quantization.modelopt_quant"].ModelOptFp8LinearMethod = \
        method_class
    flags = types.SimpleNamespace(enable_deterministic_inference=deterministic)
    modules["sglang.srt.runtime_context"].get_exec = \
        lambda: types.SimpleNamespace(deterministic=flags)
    return FakeSGLang(modules=modules, registry=registry, method_class=method_class,
                      flags=flags)


@pytest.fixture
def fake(monkeypatch):
    sg = build_fake()
    sg.install(monkeypatch)
    monkeypatch.setattr(plugin, "_state", plugin._ProcessState())
    monkeypatch.delenv(plugin.STRICT_ENV, raising=False)
    monkeypatch.delenv(ARCH_OVERRIDE_ENV, raising=False)
    # The routed cases must route on any runner: SM12x, the interpreter (SM12x's table) or
    # another family such as the H200's, where det-suite's kernel is opt-in.
    monkeypatch.setenv(OTHER_ARCH_ENV, "det_suite")
    return sg


@pytest.fixture
def hooked(fake):
    plugin.register()
    fake.registry.apply_hooks()
    return fake


def loaded_layer(method, device, *, seed=0, weight_scale=None, input_scale=None):
    lin = make_fp8_linear(N, K, seed=seed, device=device)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(lin.weight, requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(
        lin.weight_scale if weight_scale is None else weight_scale.to(device),
        requires_grad=False)
    layer.input_scale = torch.nn.Parameter(
        lin.input_scale if input_scale is None else input_scale.to(device), requires_grad=False)
    method.process_weights_after_loading(layer)
    return layer, lin


# -- registration ------------------------------------------------------------------------------

def test_register_hooks_apply_around_and_weight_loading_after(fake):
    plugin.register()
    assert fake.registry.hooks == [
        (plugin.APPLY_TARGET, plugin.around_apply, HookType.AROUND),
        (plugin.LOADED_TARGET, plugin.after_weights_loaded, HookType.AFTER)]
    assert plugin.APPLY_TARGET == ("sglang.srt.layers.quantization.modelopt_quant."
                                   "ModelOptFp8LinearMethod.apply")


def test_entry_point_value_names_register():
    assert pkgutil.resolve_name(plugin.ENTRY_POINT_VALUE) is plugin.register
    assert plugin.ENTRY_POINT_GROUP == "sglang.srt.plugins"


# -- routing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("bias_kind", ["no-bias", "bias-positional", "bias-keyword"])
def test_det_mode_returns_exactly_what_fp8_linear_returns(hooked, device, bias_kind):
    method = hooked.method_class()
    layer, lin = loaded_layer(method, device)
    assert layer.weight.shape == (K, N) and layer.weight.stride(0) == 1  # SGLang's view
    x = make_activations(M, K, device=device)
    bias = None if bias_kind == "no-bias" else \
        (torch.randn(N, generator=torch.Generator().manual_seed(3)) / 4).to(torch.bfloat16) \
        .to(device)
    if bias_kind == "bias-keyword":
        y = method.apply(layer, x, bias=bias)
    else:
        y = method.apply(layer, x, bias)
    expected = fp8_linear(x, lin.weight, lin.weight_scale, lin.input_scale, bias)
    assert not hooked.method_class.upstream_calls
    assert y.dtype == expected.dtype and torch.equal(y, expected)


def _per_channel(fake, monkeypatch):
    scale = make_fp8_linear(N, K).weight_scale
    return {"weight_scale": (scale * torch.linspace(1.0, 2.0, N)).reshape(N, 1)}


def _normal_mode(fake, monkeypatch):
    fake.flags.enable_deterministic_inference = False
    return {}


def _forced_marlin(fake, monkeypatch):
    return {"use_marlin": True}


def _fp32_activations(fake, monkeypatch):
    return {"x_dtype": torch.float32}


def _other_family_default(fake, monkeypatch):
    monkeypatch.setenv(ARCH_OVERRIDE_ENV, "sm90")
    monkeypatch.delenv(OTHER_ARCH_ENV)
    return {}


FALL_THROUGH = [
    pytest.param(_normal_mode, "normal mode is left unchanged", id="normal-mode"),
    pytest.param(_per_channel, "weight_scale has shape (16, 1)", id="per-channel-weight-scale"),
    pytest.param(_forced_marlin, "forced Marlin", id="forced-marlin"),
    pytest.param(_fp32_activations, "activations are torch.float32", id="fp32-activations"),
    pytest.param(_other_family_default, "sm90: upstream (default)",
                 id="sm90-without-opt-in"),
]


@pytest.mark.parametrize("setup, reason", FALL_THROUGH)
def test_falls_through_to_upstream_with_the_same_arguments(hooked, device, monkeypatch,
                                                           caplog, setup, reason):
    options = setup(hooked, monkeypatch)
    method = hooked.method_class(use_marlin=options.pop("use_marlin", False))
    x = make_activations(M, K, dtype=options.pop("x_dtype", torch.bfloat16), device=device)
    layer, _ = loaded_layer(method, device, **options)
    with caplog.at_level(logging.INFO, logger=plugin.__name__):
        y = method.apply(layer, x)
    ((called_self, called_layer, called_x, called_bias),) = hooked.method_class.upstream_calls
    assert (called_self, called_layer, called_x, called_bias) == (method, layer, x, None)
    assert torch.equal(y, torch.full_like(y, -7.0))
    assert any(reason in r.getMessage() for r in caplog.records), caplog.text


def test_a_layer_is_routed_again_when_the_mode_changes(hooked, device):
    """The decision remembered on a layer is for its inputs: the same layer called in normal
    mode, then in deterministic mode, goes upstream and then to det-suite."""
    method = hooked.method_class()
    layer, lin = loaded_layer(method, device)
    x = make_activations(M, K, device=device)
    hooked.flags.enable_deterministic_inference = False
    method.apply(layer, x)
    assert len(hooked.method_class.upstream_calls) == 1
    hooked.flags.enable_deterministic_inference = True
    y = method.apply(layer, x)
    assert len(hooked.method_class.upstream_calls) == 1
    assert torch.equal(y, fp8_linear(x, lin.weight, lin.weight_scale, lin.input_scale))


def test_a_per_channel_scale_that_broadcasts_one_value_is_served_as_that_value(hooked, device):
    """SGLang writes max-scale-then-channelwise scales (CUTLASS without FlashInfer's BMM):
    all equal, so det-suite's per-tensor op computes the same product."""
    method = hooked.method_class()
    lin = make_fp8_linear(N, K, device=device)
    layer, _ = loaded_layer(method, device,
                            weight_scale=lin.weight_scale.reshape(1, 1).expand(N, 1).clone())
    x = make_activations(M, K, device=device)
    y = method.apply(layer, x)
    assert not hooked.method_class.upstream_calls
    assert torch.equal(y, fp8_linear(x, lin.weight, lin.weight_scale, lin.input_scale))


def test_routing_counts_one_decision_per_layer_and_writes_them(hooked, device, monkeypatch,
                                                               tmp_path):
    import json

    monkeypatch.setenv(plugin.ROUTING_DIR_ENV, str(tmp_path))
    method = hooked.method_class()
    routed = [loaded_layer(method, device, seed=i)[0] for i in range(2)]
    declined, _ = loaded_layer(method, device,
                               weight_scale=torch.linspace(0.01, 0.02, N).reshape(N, 1))
    x = make_activations(M, K, device=device)
    for _ in range(3):
        for layer in routed + [declined]:
            method.apply(layer, x)
    (path,) = tmp_path.glob("routing-*.json")
    counts = json.loads(path.read_text())
    assert (counts["det_suite"], counts["upstream"], counts["deterministic"]) == (2, 1, True)
    ((reason, n),) = counts["reasons"].items()
    assert n == 1 and "weight_scale has shape (16, 1)" in reason


def test_another_family_routes_when_opted_in(fake, device, monkeypatch):
    monkeypatch.setenv(ARCH_OVERRIDE_ENV, "sm90")
    layer, _ = loaded_layer(fake.method_class(), device)
    decision = plugin.decide(deterministic=True, force_marlin=False, layer=layer,
                             device=layer.weight.device)
    assert decision.route is Fp8Route.DET_SUITE and "sm90" in decision.reason


def test_each_decision_is_logged_once_per_process(hooked, device, caplog):
    method = hooked.method_class()
    routed, _ = loaded_layer(method, device)
    per_channel, _ = loaded_layer(method, device,
                                  weight_scale=torch.linspace(0.01, 0.02, N).reshape(N, 1))
    x = make_activations(M, K, device=device)
    with caplog.at_level(logging.INFO, logger=plugin.__name__):
        for _ in range(2):
            method.apply(routed, x)
            method.apply(per_channel, x)
    lines = [r for r in caplog.records if "ModelOptFp8LinearMethod.apply ->" in r.getMessage()]
    assert [(r.levelno, "-> det_suite" in r.getMessage()) for r in lines] == \
        [(logging.INFO, True), (logging.WARNING, False)]


# -- the self-check ----------------------------------------------------------------------------

def test_hook_is_live_once_hooks_are_applied(hooked, device, caplog):
    assert plugin.hook_is_live()
    with caplog.at_level(logging.INFO, logger=plugin.__name__):
        loaded_layer(hooked.method_class(), device)
    assert plugin.LIVE_MARK in caplog.text


def test_no_hook_means_not_live(fake):
    assert not plugin.hook_is_live()


def test_a_hook_sglang_failed_to_apply_stops_the_load_in_det_mode(fake, device):
    plugin.register()
    fake.registry.apply_hooks(only=plugin.LOADED_TARGET)   # apply's hook "failed to apply"
    with pytest.raises(plugin.PluginNotLiveError, match="not live.*9.9.9-fake"):
        loaded_layer(fake.method_class(), device)


def test_a_dead_hook_in_normal_mode_only_warns(fake, device, caplog):
    fake.flags.enable_deterministic_inference = False
    plugin.register()
    fake.registry.apply_hooks(only=plugin.LOADED_TARGET)
    with caplog.at_level(logging.WARNING, logger=plugin.__name__):
        loaded_layer(fake.method_class(), device)
    assert "not live" in caplog.text and plugin.LIVE_MARK not in caplog.text


def test_a_routed_layer_with_a_bad_scale_fails_at_load(hooked, device):
    with pytest.raises(ValueError, match="input_scale must be finite and positive"):
        loaded_layer(hooked.method_class(), device, input_scale=torch.tensor(-1.0))


# -- drift -------------------------------------------------------------------------------------

def _no_registry(sg, monkeypatch):
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", None)
    monkeypatch.delattr(sg.modules["sglang.srt.plugins"], "hook_registry")


def _no_class(sg, monkeypatch):
    monkeypatch.delattr(sg.modules["sglang.srt.layers.quantization.modelopt_quant"],
                        "ModelOptFp8LinearMethod")


def _apply_gained_a_parameter(sg, monkeypatch):
    monkeypatch.setattr(sg.method_class, "apply", lambda self, layer, x, bias=None, out=None: x)


def _apply_renamed_a_parameter(sg, monkeypatch):
    monkeypatch.setattr(sg.method_class, "apply", lambda self, layer, input_, bias=None: None)


def _no_weight_loading_hook(sg, monkeypatch):
    monkeypatch.delattr(sg.method_class, "process_weights_after_loading")


def _no_get_exec(sg, monkeypatch):
    monkeypatch.delattr(sg.modules["sglang.srt.runtime_context"], "get_exec")


DRIFT = [
    pytest.param(_no_registry, "hook_registry", id="no-hook-registry"),
    pytest.param(_no_class, "ModelOptFp8LinearMethod", id="no-method-class"),
    pytest.param(_apply_gained_a_parameter, "expected \\(self, layer, x, bias=None\\)",
                 id="apply-gained-a-parameter"),
    pytest.param(_apply_renamed_a_parameter, "input_", id="apply-renamed-a-parameter"),
    pytest.param(_no_weight_loading_hook, "process_weights_after_loading",
                 id="no-weight-loading-method"),
    pytest.param(_no_get_exec, "get_exec", id="no-runtime-config-reader"),
]


@pytest.mark.parametrize("drift, names", DRIFT)
def test_drift_fails_loudly_naming_the_sglang_version(fake, monkeypatch, drift, names):
    drift(fake, monkeypatch)
    with pytest.raises(plugin.PluginDriftError, match=f"found sglang {FAKE_VERSION}.*{names}"):
        plugin.register()
    assert fake.registry.hooks == []


def test_drift_under_the_strict_switch_exits_the_process(fake, monkeypatch):
    _no_class(fake, monkeypatch)
    monkeypatch.setenv(plugin.STRICT_ENV, "1")
    with pytest.raises(SystemExit, match="ModelOptFp8LinearMethod"):
        plugin.register()


@pytest.mark.parametrize("broken, names", [
    pytest.param("flag", "enable_deterministic_inference", id="deterministic-flag-moved"),
    pytest.param("marlin", "use_marlin", id="use-marlin-gone"),
])
def test_drift_at_run_time_fails_the_call(hooked, device, broken, names):
    method = hooked.method_class()
    layer, _ = loaded_layer(method, device)
    if broken == "flag":
        hooked.modules["sglang.srt.runtime_context"].get_exec = \
            lambda: types.SimpleNamespace(deterministic=None)
    else:
        del method.use_marlin
    with pytest.raises(plugin.PluginDriftError, match=names):
        method.apply(layer, make_activations(M, K, device=device))


# -- against the real SGLang -------------------------------------------------------------------

@pytest.mark.sglang
def test_real_sglang_has_every_target():
    real_sglang.import_sglang()
    registry, hook_type, method_class = plugin.check_targets()
    assert method_class.__name__ == "ModelOptFp8LinearMethod"


@pytest.mark.sglang
def test_real_sglang_hook_goes_live(monkeypatch):
    real_sglang.import_sglang()
    from sglang.srt.plugins.hook_registry import HookRegistry

    method_class = pkgutil.resolve_name(plugin.METHOD_CLASS)
    for name in ("apply", "process_weights_after_loading"):
        monkeypatch.setattr(method_class, name, method_class.__dict__[name])
    monkeypatch.setattr(plugin, "_state", plugin._ProcessState())
    assert not plugin.hook_is_live()
    try:
        plugin.register()
        HookRegistry.apply_hooks()
        assert plugin.hook_is_live()
    finally:
        HookRegistry.reset()
