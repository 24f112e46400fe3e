"""det-suite's SGLang plugin: ModelOpt static per-tensor FP8 linears served by det-suite's
fixed-schedule kernel in deterministic inference, without patching SGLang's files.

SGLang's `load_plugins()` calls `register` (entry point group `sglang.srt.plugins`, name
`det_suite`) in every process that runs the model, then `HookRegistry.apply_hooks()`. Two
hooks go on `ModelOptFp8LinearMethod`:

- AROUND `apply(self, layer, x, bias=None)`: `det_suite.ops.dispatch.select_fp8_route` decides
  (forced Marlin and normal mode stay upstream; deterministic mode on SM12x, or on another
  family when DET_SUITE_FP8_OTHER_ARCH=det_suite, goes to det-suite), then the layer must
  hold one per-tensor weight scale (or a per-channel one whose entries are all equal,
  proven at load) and input scale and the activations be BF16/FP16, else upstream serves
  it and the log says why. Each linear layer's decision is counted; with
  DET_SUITE_SGLANG_ROUTING_DIR set, each process writes its counts there. The weight
  SGLang keeps after loading is the (K, N) view of an [N, K] tensor, passed to
  `fp8_linear` as such (weight_layout="kn").
- AFTER `process_weights_after_loading`: the self-check. SGLang applies hooks after the
  plugins ran and only logs a hook that failed to apply, so once per process, with the
  model loading, the plugin calls the patched `apply` with a probe only its own hook
  answers; a dead hook in deterministic mode stops the load with an error. It also
  validates the scales of routed layers there, outside any CUDA Graph capture.

Drift (a target gone, `apply`'s signature changed, the deterministic flag moved) raises
`PluginDriftError` naming the installed SGLang version. SGLang logs a plugin's exception
and carries on upstream; with DET_SUITE_SGLANG_STRICT=1 (the launcher sets it for the
plugin arm) the process exits instead.

One log line per process and distinct decision says what was routed where and why; the
line `det-suite sglang plugin: hook live` marks a process whose hook answered the probe.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import pkgutil
import sys
from dataclasses import dataclass, field

import torch

from det_suite.ops.dispatch import Decision, Fp8Route, select_fp8_route
from det_suite.platform.family import device_family

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "sglang.srt.plugins"
ENTRY_POINT_NAME = "det_suite"
ENTRY_POINT_VALUE = "det_suite.backends.sglang.plugin:register"
WRITTEN_AGAINST = "0.5.23"

HOOK_REGISTRY = "sglang.srt.plugins.hook_registry"
METHOD_CLASS = "sglang.srt.layers.quantization.modelopt_quant.ModelOptFp8LinearMethod"
APPLY_TARGET = METHOD_CLASS + ".apply"
LOADED_TARGET = METHOD_CLASS + ".process_weights_after_loading"
RUNTIME_CONTEXT = "sglang.srt.runtime_context"
APPLY_PARAMETERS = ("self", "layer", "x", "bias")

STRICT_ENV = "DET_SUITE_SGLANG_STRICT"
# A folder the launcher makes empty for each boot: every process writes its routing counts
# there (routing-<pid>.json), so one boot's counts never satisfy another's check.
ROUTING_DIR_ENV = "DET_SUITE_SGLANG_ROUTING_DIR"
LOG_PREFIX = "det-suite sglang plugin:"
LIVE_MARK = f"{LOG_PREFIX} hook live"

_ROUTE_ATTR = "_det_suite_route"
_SCALAR_SCALE_ATTR = "_det_suite_scalar_weight_scale"


class PluginDriftError(RuntimeError):
    """SGLang no longer has what the plugin hooks, in the shape it was written against."""


class PluginNotLiveError(RuntimeError):
    """The plugin registered its hook, but calling the target does not reach it."""


@dataclass
class _ProcessState:
    announced: set = field(default_factory=set)
    live: bool = False
    # id(layer) -> (route, reason) of its latest decision: one entry per linear layer.
    layers: dict = field(default_factory=dict)


_state = _ProcessState()


class _LivenessProbe:
    """A layer no SGLang code builds: only det-suite's own hook answers it."""


_PROBE = _LivenessProbe()
_PROBE_REPLY = object()


# -- SGLang's surface, checked -----------------------------------------------------------------

def sglang_version() -> str:
    """The imported sglang's version (the code that runs), else the installed one."""
    loaded = getattr(sys.modules.get("sglang"), "__version__", None)
    if loaded:
        return str(loaded)
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("sglang")
    except PackageNotFoundError:
        return "unknown"


def _drift(problem: str) -> PluginDriftError:
    return PluginDriftError(
        f"written against sglang {WRITTEN_AGAINST}, found sglang {sglang_version()}: "
        f"{problem}; det-suite's FP8 kernel is NOT in use in this process")


def _resolve(dotted: str, what: str):
    try:
        return pkgutil.resolve_name(dotted)
    except (ImportError, AttributeError, ValueError) as exc:
        raise _drift(f"{what} {dotted} is missing ({type(exc).__name__}: {exc})") from None


def check_targets():
    """(HookRegistry, HookType, ModelOptFp8LinearMethod) when SGLang still has every name and
    signature the plugin relies on; PluginDriftError naming the first that is not."""
    registry_module = _resolve(HOOK_REGISTRY, "the hook registry module")
    registry = getattr(registry_module, "HookRegistry", None)
    hook_type = getattr(registry_module, "HookType", None)
    if not callable(getattr(registry, "register", None)) or not all(
            hasattr(hook_type, name) for name in ("AROUND", "AFTER")):
        raise _drift(f"{HOOK_REGISTRY} has no HookRegistry.register or no HookType.AROUND/AFTER")
    method_class = _resolve(METHOD_CLASS, "the ModelOpt FP8 linear method")
    apply = getattr(method_class, "apply", None)
    try:
        parameters = inspect.signature(apply).parameters
    except (TypeError, ValueError):
        raise _drift(f"{APPLY_TARGET} is not a function") from None
    bias = parameters.get("bias")
    if tuple(parameters) != APPLY_PARAMETERS or bias is None or bias.default is not None:
        raise _drift(f"{APPLY_TARGET} has signature {inspect.signature(apply)}; expected "
                     "(self, layer, x, bias=None)")
    if not callable(getattr(method_class, "process_weights_after_loading", None)):
        raise _drift(f"{LOADED_TARGET} is missing")
    if not callable(getattr(_resolve(RUNTIME_CONTEXT, "the runtime context module"),
                            "get_exec", None)):
        raise _drift(f"{RUNTIME_CONTEXT}.get_exec is missing")
    return registry, hook_type, method_class


def _strict() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def register() -> None:
    """The entry point: SGLang calls it with no arguments in each process, before it applies
    the registered hooks."""
    try:
        registry, hook_type, _ = check_targets()
    except PluginDriftError as exc:
        logger.error("%s %s", LOG_PREFIX, exc)
        if _strict():
            # SystemExit passes SGLang's `except Exception` around plugins: the process
            # stops instead of serving the upstream path under a det-suite claim.
            raise SystemExit(f"{LOG_PREFIX} {exc} ({STRICT_ENV} is set)") from exc
        raise
    registry.register(APPLY_TARGET, around_apply, hook_type.AROUND)
    registry.register(LOADED_TARGET, after_weights_loaded, hook_type.AFTER)
    logger.info("%s registered on %s (pid %d, sglang %s)", LOG_PREFIX, METHOD_CLASS,
                os.getpid(), sglang_version())


def deterministic_inference() -> bool:
    """SGLang's deterministic-inference flag, read at run time from the published config."""
    module = sys.modules.get(RUNTIME_CONTEXT) or importlib.import_module(RUNTIME_CONTEXT)
    try:
        return bool(module.get_exec().deterministic.enable_deterministic_inference)
    except AttributeError as exc:
        raise _drift(f"{RUNTIME_CONTEXT}.get_exec().deterministic."
                     f"enable_deterministic_inference is unreadable ({exc})") from None


# -- the decision ------------------------------------------------------------------------------

def per_tensor_problem(layer) -> str | None:
    """Why det-suite's op cannot serve this layer exactly, or None when it can."""
    weight = getattr(layer, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dtype != torch.float8_e4m3fn \
            or weight.dim() != 2:
        what = "missing" if weight is None else f"{getattr(weight, 'dtype', type(weight))}"
        return f"its weight is {what}, not a 2-D float8_e4m3fn tensor"
    for name in ("input_scale", "weight_scale"):
        scale = getattr(layer, name, None)
        if not isinstance(scale, torch.Tensor):
            return f"it has no {name}"
        if scale.numel() == 1 and scale.dim() <= 1:
            continue
        if name == "weight_scale" and layer.__dict__.get(_SCALAR_SCALE_ATTR) is not None:
            continue  # a broadcast of one value, proven when the weights loaded
        return (f"its {name} has shape {tuple(scale.shape)}, not one per-tensor value "
                "nor a broadcast of one (SGLang keeps a per-output-channel weight_scale "
                "when CUTLASS serves the layer without FlashInfer's BMM), and det-suite's "
                "op takes a per-tensor scale")
    return None


def broadcast_scalar(scale) -> torch.Tensor | None:
    """The one value of a per-channel scale whose entries are all equal (SGLang's
    requantize-with-max-scale then convert-to-channelwise writes exactly that), as a
    1-element view; None otherwise. Reads the device: call it outside graph capture."""
    if not isinstance(scale, torch.Tensor) or scale.numel() < 2:
        return None
    flat = scale.reshape(-1)
    return flat[:1] if bool(torch.all(flat == flat[0])) else None


def decide(*, deterministic: bool, force_marlin: bool, layer, device) -> Decision:
    decision = select_fp8_route(family=device_family(device), deterministic=deterministic,
                                force_marlin=force_marlin)
    if decision.route is not Fp8Route.DET_SUITE:
        return decision
    problem = per_tensor_problem(layer)
    if problem is not None:
        return Decision(Fp8Route.UPSTREAM, f"{decision.reason}; but {problem}, so upstream "
                                           "serves this layer")
    return decision


def _announce(decision: Decision, deterministic: bool) -> None:
    key = (decision.route, decision.reason)
    if key in _state.announced:
        return
    _state.announced.add(key)
    # Deterministic mode left on a path det-suite does not vouch for deserves attention.
    level = (logging.WARNING if deterministic and decision.route is Fp8Route.UPSTREAM
             else logging.INFO)
    logger.log(level, "%s pid %d: ModelOptFp8LinearMethod.apply -> %s (%s)", LOG_PREFIX,
               os.getpid(), decision.route.value, decision.reason)


def routing(method, layer, x) -> Decision:
    """The decision for this call, remembered on the layer until its inputs change."""
    deterministic = deterministic_inference()
    try:
        force_marlin = bool(method.use_marlin)
    except AttributeError:
        raise _drift("ModelOptFp8LinearMethod has no use_marlin attribute") from None
    key = (deterministic, force_marlin, x.device, x.dtype)
    cached = layer.__dict__.get(_ROUTE_ATTR)
    if cached is not None and cached[0] == key:
        return cached[1]
    decision = decide(deterministic=deterministic, force_marlin=force_marlin, layer=layer,
                      device=x.device)
    if decision.route is Fp8Route.DET_SUITE and x.dtype not in (torch.bfloat16, torch.float16):
        decision = Decision(Fp8Route.UPSTREAM, f"{decision.reason}; but the activations are "
                                               f"{x.dtype}, not bfloat16/float16, so upstream "
                                               "serves this layer")
    setattr(layer, _ROUTE_ATTR, (key, decision))
    _announce(decision, deterministic)
    _count(layer, decision, deterministic)
    return decision


def routing_counts() -> dict:
    """This process's decisions, one per linear layer: {"det_suite": n, "upstream": n,
    "reasons": {reason: n}} for the layers that went upstream."""
    routed = list(_state.layers.values())
    reasons: dict[str, int] = {}
    for route, reason in routed:
        if route != Fp8Route.DET_SUITE.value:
            reasons[reason] = reasons.get(reason, 0) + 1
    return {"det_suite": sum(r == Fp8Route.DET_SUITE.value for r, _ in routed),
            "upstream": sum(r != Fp8Route.DET_SUITE.value for r, _ in routed),
            "reasons": reasons}


def _count(layer, decision: Decision, deterministic: bool) -> None:
    entry = (decision.route.value, decision.reason)
    if _state.layers.get(id(layer)) == entry:
        return
    _state.layers[id(layer)] = entry
    folder = os.environ.get(ROUTING_DIR_ENV)
    if not folder:
        return
    import json
    from pathlib import Path

    payload = {"pid": os.getpid(), "deterministic": deterministic, **routing_counts()}
    path = Path(folder) / f"routing-{os.getpid()}.json"
    try:  # written whole, then renamed: a reader never sees half a file
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:
        logger.error("%s cannot write routing counts to %s: %s", LOG_PREFIX, path, exc)


# -- the hooks ---------------------------------------------------------------------------------

def around_apply(original, method, layer, x, bias=None):
    if layer is _PROBE:
        return _PROBE_REPLY
    if routing(method, layer, x).route is Fp8Route.DET_SUITE:
        from det_suite.ops.linear import fp8_linear
        scale = layer.__dict__.get(_SCALAR_SCALE_ATTR)
        return fp8_linear(x, layer.weight, layer.weight_scale if scale is None else scale,
                          layer.input_scale, bias, weight_layout="kn")
    return original(method, layer, x, bias)


def hook_is_live() -> bool:
    """Whether calling the patched `apply` reaches det-suite's hook in this process."""
    try:
        method_class = pkgutil.resolve_name(METHOD_CLASS)
        return method_class.apply(None, _PROBE, None) is _PROBE_REPLY
    except Exception:  # noqa: BLE001 - the unpatched apply fails on the probe: not live
        return False


def verify_live() -> None:
    """Once per process: raise PluginNotLiveError when the hook is dead and deterministic
    inference is on (or unreadable); only warn in normal mode, where upstream is right."""
    if _state.live:
        return
    if not hook_is_live():
        problem = (f"the AROUND hook on {APPLY_TARGET} is not live in pid {os.getpid()} "
                   f"(sglang {sglang_version()}); SGLang only logs a hook it failed to apply "
                   "('Failed to apply hooks to ...'), so det-suite's kernel would silently "
                   "not be used")
        try:
            deterministic = deterministic_inference()
        except Exception:  # noqa: BLE001 - unknown mode: assume the claim matters
            deterministic = True
        if deterministic:
            logger.error("%s %s", LOG_PREFIX, problem)
            raise PluginNotLiveError(problem)
        logger.warning("%s %s (normal mode: upstream serves every layer anyway)", LOG_PREFIX,
                       problem)
        return
    _state.live = True
    # WARNING, not INFO: the launcher looks for this line, whatever the log level.
    logger.warning("%s on %s (pid %d, sglang %s)", LIVE_MARK, METHOD_CLASS, os.getpid(),
                   sglang_version())


def _validate_routed_scales(method, layer) -> None:
    """Check a routed layer's scales now, not inside a CUDA Graph capture (where the op's
    first check of a scale, a device read, is not allowed)."""
    try:
        deterministic = deterministic_inference()
    except ValueError:
        return  # config not published in this process: apply reads it at run time
    weight = getattr(layer, "weight", None)
    if not isinstance(weight, torch.Tensor):
        return
    decision = decide(deterministic=deterministic, force_marlin=bool(method.use_marlin),
                      layer=layer, device=weight.device)
    if decision.route is not Fp8Route.DET_SUITE:
        return
    from det_suite.ops.validation import validate_scale
    for name in ("input_scale", "weight_scale"):
        scale = getattr(layer, name)
        if name == "weight_scale" and layer.__dict__.get(_SCALAR_SCALE_ATTR) is not None:
            scale = layer.__dict__[_SCALAR_SCALE_ATTR]
        try:
            validate_scale(scale, name)
        except ValueError as exc:
            raise ValueError(f"{LOG_PREFIX} a ModelOpt FP8 layer routed to det-suite's kernel "
                             f"has a bad scale: {exc}") from None


def after_weights_loaded(result, method, layer):
    layer.__dict__.pop(_ROUTE_ATTR, None)  # its tensors were just replaced
    layer.__dict__.pop(_SCALAR_SCALE_ATTR, None)
    scalar = broadcast_scalar(getattr(layer, "weight_scale", None))
    if scalar is not None:
        layer.__dict__[_SCALAR_SCALE_ATTR] = scalar
    verify_live()
    _validate_routed_scales(method, layer)
    return result
