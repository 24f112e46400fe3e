"""FP8 linear providers behind one op-level call signature:

    fn(x, weight_nk, weight_scale, input_scale, bias) -> y

x: BF16/FP16 (..., K), any strides; weight_nk: float8_e4m3fn [N, K]; scales: one-element
float32; bias: (N,) or None. y: x.dtype, shape (..., N).

Provider names (what `--providers` accepts):

- ``det_suite[:FAMILY][:sN][:smsC][:ws]``  det-suite's kernel with FAMILY's shipped tile table
  (default: this device's family) at N pipeline stages (default: the table's), served as
  `ops.fp8_linear` serves it: shapes no entry names take the family's generic rule for
  the device's SM count (C overrides it; on the CPU, where there is none, `smsC` is how the
  interpreter runs the rule's tiles). ``:ws`` runs every tile the warp-specialised SM90
  kernel could run as one (what a table would switch on; on the CPU, the TMA tile). Claims
  invariance only on its own family; forced onto another family's table it is measured,
  not claimed.
- ``control``                  positive control: det-suite's kernel with BLOCK_K and split-K
  chosen by M. It must be reported non-invariant, or the comparison is blind.
- ``bf16_linear``              F.linear on the dequantized weight (no FP8 GEMM).
- ``reference_rowwise``        negative control: the FP8 product in fp32, one row per call,
  so invariant by construction; if the harness flags it, the harness is broken.
- ``torch_scaled_mm``, ``sglang_fp8_scaled_mm``, ``flashinfer_bmm_fp8``: vendor GEMMs from
  det_suite.vendors, fed by det-suite's quantizer (elementwise, the same bits for all).
- ``sglang_apply_fp8_linear``  SGLang's own op-level apply function (quantizer included).
- ``package.module:function``  any callable with the signature above; claims invariance
  unless told otherwise.
- ``auto`` (what runs here by default), ``all`` (everything available here).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from det_suite import vendors
from det_suite.platform.family import KNOWN_FAMILIES, device_family, interpreter_active
from det_suite.policy import LaunchConfig, SUPPORTED_STAGES, shipped_families, shipped_policy

LinearFn = Callable[..., torch.Tensor]

DET_SUITE = "det_suite"
CONTROL = "control"
BF16_LINEAR = "bf16_linear"
REFERENCE = "reference_rowwise"
SGLANG_APPLY = "sglang_apply_fp8_linear"
SGLANG_APPLY_MODULE = "sglang.srt.layers.quantization.fp8_utils"
SGLANG_APPLY_PARAMETERS = ("input", "weight", "weight_scale", "input_scale", "bias")


@dataclass(frozen=True)
class Provider:
    name: str
    fn: LinearFn
    description: str
    claims_invariance: bool
    expect_variant: bool = False      # positive control: the run fails unless it varies
    ab_group: str | None = None       # pipeline A/B arms share a group (same arithmetic)
    num_stages: int | None = None
    family: str | None = None         # det-suite tile family, for the instruction table
    unavailable: str | None = None    # why it cannot run here (None: it can)
    graph_capturable: bool = True

    def __post_init__(self) -> None:
        if self.claims_invariance and self.expect_variant:
            raise ValueError(f"provider {self.name}: a positive control cannot also claim "
                             "invariance")

    def __call__(self, x, weight_nk, weight_scale, input_scale, bias):
        return self.fn(x, weight_nk, weight_scale, input_scale, bias)

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description,
                "claims_invariance": self.claims_invariance,
                "expect_variant": self.expect_variant, "ab_group": self.ab_group,
                "num_stages": self.num_stages, "family": self.family,
                "unavailable": self.unavailable}


# ---------------------------------------------------------------- shared helpers

def _flatten(x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    k = x.shape[-1]
    return x.reshape(-1, k), tuple(x.shape[:-1])


def _kernel_unavailable(device: torch.device) -> str | None:
    if device.type == "cuda" or interpreter_active():
        return None
    return "det-suite's Triton kernels need a CUDA device or TRITON_INTERPRET=1 on the CPU"


# ---------------------------------------------------------------- det-suite's kernel

def served_policy(family: str, device, sm_count: int | None = None):
    """FAMILY's shipped table as `ops.fp8_linear` serves it on `device`: unnamed shapes take
    the generic rule for `sm_count` SMs (default: the device's; none on the CPU)."""
    from det_suite.ops.linear import device_policy

    table = shipped_policy(family)
    if sm_count is not None:
        return table.on_device(sm_count)
    return device_policy(torch.device(device), table)


def _warp_specialized_linear(policy, num_stages):
    """`ops.fp8_linear` with every tile the warp-specialised kernel could run turned into
    one (`lint.variants.warp_specialized_candidate`): its tiles in the invariance matrix
    before a table turns them on."""
    from det_suite import ops
    from det_suite.lint.variants import warp_specialized_candidate

    def linear(x, weight_nk, weight_scale, input_scale, bias):
        x2d, lead = _flatten(x)
        m, n, k = x2d.shape[0], weight_nk.shape[0], x2d.shape[1]
        config = policy.select(max(m, 1), n, k, num_stages=num_stages)
        config = warp_specialized_candidate(config) or config
        y = ops.fp8_scaled_mm(ops.quantize_fp8(x2d, input_scale), weight_nk, input_scale,
                              weight_scale, bias, out_dtype=x.dtype, weight_layout="nk",
                              config=config)
        return y.reshape(*lead, n)
    return linear


def det_suite_provider(device, family: str | None = None,
                       num_stages: int | None = None, sm_count: int | None = None,
                       warp_specialized: bool = False) -> Provider:
    from det_suite import ops

    device = torch.device(device)
    native = device_family(device)
    family = family or native
    if sm_count is not None and sm_count < 1:
        raise ValueError(f"det_suite:{family}:sms{sm_count}: the SM count must be >= 1")
    policy = served_policy(family, device, sm_count)
    if num_stages is not None and num_stages not in SUPPORTED_STAGES:
        raise ValueError(f"det_suite:{family}:s{num_stages}: stages must be one of "
                         f"{SUPPORTED_STAGES}")

    def fp8_linear(x, weight_nk, weight_scale, input_scale, bias):
        return ops.fp8_linear(x, weight_nk, weight_scale, input_scale, bias,
                              weight_layout="nk", num_stages=num_stages, policy=policy)

    if warp_specialized:
        fp8_linear = _warp_specialized_linear(policy, num_stages)
    sms = f":sms{sm_count}" if sm_count is not None else ""
    sms += ":ws" if warp_specialized else ""
    name = f"{DET_SUITE}:{family}" + (f":s{num_stages}" if num_stages else "") + sms
    stages = f"{num_stages} stages" if num_stages else "the table's stages"
    served = (f", unnamed shapes on the rule for {policy.sm_count} SMs" if policy.sm_count
              else "")
    own = family == native
    return Provider(
        name=name, fn=fp8_linear, family=family, num_stages=num_stages,
        description=(f"det-suite fp8_linear, {family} tile table, {stages}{served}"
                     + ("" if own else f" (foreign to this device's {native}: measured)")),
        claims_invariance=own, ab_group=f"{DET_SUITE}:{family}{sms}",
        unavailable=_kernel_unavailable(device))


# ---------------------------------------------------------------- positive control

def control_config(m: int) -> LaunchConfig:
    """The control's launch config: BLOCK_K and split-K follow M, which the invariance rule
    forbids. M <= 32: BLOCK_K 32 in two K chunks combined in order (a later chunk holds
    >= 2 tiles once K > 96); above: BLOCK_K 64, one chunk. Either change alone regroups
    the sum; BLOCK_K alone already does on K=80, where a 2-way split of 3 tiles would not."""
    small = m <= 32
    return LaunchConfig(block_m=64, block_n=64, block_k=32 if small else 64, num_warps=4,
                        num_stages=2, split_k=2 if small else 1, group_m=8,
                        use_workspace=small)


def control_provider(device) -> Provider:
    from det_suite import ops

    def control(x, weight_nk, weight_scale, input_scale, bias):
        x2d, lead = _flatten(x)
        q = ops.quantize_fp8(x2d, input_scale)
        y = ops.fp8_scaled_mm(q, weight_nk, input_scale, weight_scale, bias,
                              out_dtype=x.dtype, weight_layout="nk",
                              config=control_config(x2d.shape[0]))
        return y.reshape(*lead, weight_nk.shape[0])

    return Provider(name=CONTROL, fn=control, claims_invariance=False, expect_variant=True,
                    description="positive control: det-suite kernel with BLOCK_K/split-K "
                                "chosen by M (must be flagged)",
                    unavailable=_kernel_unavailable(torch.device(device)))


# ---------------------------------------------------------------- BF16 reference path

def bf16_linear(x, weight_nk, weight_scale, input_scale, bias):
    # The unquantized path an engine falls back to: activations never go through FP8.
    w = (weight_nk.to(torch.float32) * weight_scale).to(x.dtype)
    return torch.nn.functional.linear(x, w, bias)


def bf16_provider(device) -> Provider:
    return Provider(name=BF16_LINEAR, fn=bf16_linear, claims_invariance=False,
                    description="F.linear on the dequantized weight, activation dtype")


# ---------------------------------------------------------------- negative control

def reference_rowwise(x, weight_nk, weight_scale, input_scale, bias):
    """The static FP8 linear in fp32, each row its own (1, K) product: every row takes the
    same path whatever M is. torch's fp8 cast rounds to nearest even, as det-suite's
    quantizer does, so q matches every provider's quantized input."""
    x2d, lead = _flatten(x)
    q = (x2d.float() / input_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()
    w = weight_nk.float()
    rows = [torch.nn.functional.linear(q[i:i + 1], w) for i in range(q.shape[0])]
    y = torch.cat(rows) if rows else q.new_zeros((0, w.shape[0]))
    y = y * (input_scale * weight_scale)
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).reshape(*lead, weight_nk.shape[0])


def reference_provider(device) -> Provider:
    return Provider(name=REFERENCE, fn=reference_rowwise, claims_invariance=True,
                    description="negative control: fp32 FP8 product one row per call "
                                "(invariant by construction)")


# ---------------------------------------------------------------- vendor GEMMs

def _vendor_unavailable(name: str, device: torch.device) -> str | None:
    if device.type != "cuda" and name != "torch_scaled_mm":
        return f"{name} needs a CUDA device"
    if name not in vendors.available_vendor_gemms():
        return f"{name}: its package is not importable here"
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (8, 9):
            return f"{name} needs FP8 tensor cores (SM89+); device is SM{major}{minor}"
    return None


def vendor_provider(name: str, device) -> Provider:
    device = torch.device(device)
    gemm = vendors.VENDOR_GEMMS[name]
    from det_suite import ops

    def vendor_linear(x, weight_nk, weight_scale, input_scale, bias):
        x2d, lead = _flatten(x)
        q = ops.quantize_fp8(x2d, input_scale)
        y = gemm.fn(q, weight_nk.t(), input_scale, weight_scale, bias, x.dtype)
        return y.reshape(*lead, weight_nk.shape[0])

    return Provider(name=name, fn=vendor_linear, claims_invariance=False,
                    description=f"{gemm.description}, det-suite quantizer",
                    unavailable=_vendor_unavailable(name, device))


def sglang_apply_provider(device) -> Provider:
    """SGLang's `apply_fp8_linear`, looked up when asked for; untested here (no sglang)."""
    try:
        fn = vendors.require_attr(SGLANG_APPLY_MODULE, "apply_fp8_linear",
                                   "sglang apply_fp8_linear")
    except ImportError as exc:
        return Provider(name=SGLANG_APPLY, fn=_unavailable_fn(str(exc)),
                        claims_invariance=False, description="SGLang apply_fp8_linear",
                        unavailable=str(exc))
    check_sglang_apply_signature(fn)

    def apply(x, weight_nk, weight_scale, input_scale, bias):
        x2d, lead = _flatten(x)
        # SGLang keeps ModelOpt weights as the (K, N) column-major view weight.t().
        y = fn(input=x2d, weight=weight_nk.t(), weight_scale=weight_scale,
               input_scale=input_scale, bias=bias)
        return y.reshape(*lead, weight_nk.shape[0])

    reason = None if torch.device(device).type == "cuda" else "SGLang's kernels need CUDA"
    return Provider(name=SGLANG_APPLY, fn=apply, claims_invariance=False,
                    description=f"{SGLANG_APPLY_MODULE}.apply_fp8_linear (SGLang's quantizer "
                                "and GEMM choice)", unavailable=reason)


def check_sglang_apply_signature(fn) -> None:
    """Fail loudly when the installed SGLang's apply_fp8_linear takes other arguments."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{SGLANG_APPLY_MODULE}.apply_fp8_linear: cannot read its signature "
                        f"({exc}); det-suite expects parameters "
                        f"{', '.join(SGLANG_APPLY_PARAMETERS)}") from exc
    missing = [p for p in SGLANG_APPLY_PARAMETERS if p not in params]
    if missing:
        raise TypeError(f"{SGLANG_APPLY_MODULE}.apply_fp8_linear has parameters "
                        f"({', '.join(params)}); det-suite expects "
                        f"{', '.join(SGLANG_APPLY_PARAMETERS)} (missing: "
                        f"{', '.join(missing)}). The provider needs updating for this "
                        "SGLang version.")


def _unavailable_fn(reason: str) -> LinearFn:
    def fn(*_args, **_kwargs):
        raise RuntimeError(reason)
    return fn


# ---------------------------------------------------------------- custom callables

def custom_provider(spec: str) -> Provider:
    """`package.module:function` with the op-level signature; claims invariance."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"custom provider {spec!r} must be 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"custom provider {spec!r}: cannot import {module_name!r}: "
                         f"{exc}") from exc
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"custom provider {spec!r}: {module_name} has no attribute "
                             f"{attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"custom provider {spec!r} is not callable")
    return Provider(name=spec, fn=fn, claims_invariance=True,
                    description=f"custom callable {spec}")


# ---------------------------------------------------------------- registry

def native_family(device) -> str:
    return device_family(torch.device(device))


def _det_suite_from_spec(spec: str, device) -> Provider:
    parts = spec.split(":")[1:]
    family, stages, sm_count, warp_specialized = None, None, None, False
    for part in parts:
        if part in KNOWN_FAMILIES or part == "default":
            if family is not None:
                raise ValueError(f"{spec!r}: more than one tile family")
            family = part
        elif part[:1] == "s" and part[1:].isdigit():
            stages = int(part[1:])
        elif part[:3] == "sms" and part[3:].isdigit():
            sm_count = int(part[3:])
        elif part == "ws":
            warp_specialized = True
        else:
            raise ValueError(f"{spec!r}: {part!r} is neither a tile family "
                             f"({', '.join(shipped_families())}), a stage count sN, an "
                             "SM count smsC nor ws")
    return det_suite_provider(device, family, stages, sm_count, warp_specialized)


NAMED = (CONTROL, REFERENCE, BF16_LINEAR, SGLANG_APPLY) + tuple(vendors.VENDOR_GEMMS)


def provider_from_spec(spec: str, device) -> Provider:
    if spec == DET_SUITE or spec.startswith(DET_SUITE + ":"):
        return _det_suite_from_spec(spec, device)
    if spec == CONTROL:
        return control_provider(device)
    if spec == BF16_LINEAR:
        return bf16_provider(device)
    if spec == REFERENCE:
        return reference_provider(device)
    if spec == SGLANG_APPLY:
        return sglang_apply_provider(device)
    if spec in vendors.VENDOR_GEMMS:
        return vendor_provider(spec, device)
    if ":" in spec:
        return custom_provider(spec)
    raise ValueError(f"unknown provider {spec!r}; expected "
                     f"det_suite[:FAMILY][:sN][:smsC][:ws], "
                     f"{', '.join(NAMED)}, module:function, auto or all")


def default_specs(device) -> list[str]:
    """What runs when no provider is named.

    det-suite's kernel on this device's family at 2 and 3 stages (the pipeline A/B arms),
    plus its table as shipped when that uses other depths; one foreign table for contrast
    (the seed's on anything but SM12x, SM90's on SM12x and the interpreter); the BF16 path;
    the positive control; and, on a GPU, every importable vendor GEMM (on the CPU a vendor
    result says nothing about cuBLAS/CUTLASS, so vendors run there only when named).
    """
    device = torch.device(device)
    native = native_family(device)
    specs = [f"{DET_SUITE}:{native}:s2", f"{DET_SUITE}:{native}:s3"]
    table_stages = {t.num_stages for e in shipped_policy(native).all_entries()
                    for t in e.m_tiles}
    if table_stages != {3}:
        specs.append(f"{DET_SUITE}:{native}")
    specs.append(f"{DET_SUITE}:{'sm90' if native == 'sm120' else 'sm120'}")
    specs += [BF16_LINEAR, CONTROL]
    if device.type == "cuda":
        specs += list(vendors.available_vendor_gemms())
    return specs


def all_specs(device) -> list[str]:
    device = torch.device(device)
    specs = [f"{DET_SUITE}:{f}" for f in shipped_families()]
    specs += [f"{DET_SUITE}:{native_family(device)}:s{s}" for s in (2, 3)]
    specs += [BF16_LINEAR, CONTROL, REFERENCE] + list(vendors.VENDOR_GEMMS) + [SGLANG_APPLY]
    return specs


@dataclass
class Selection:
    providers: list[Provider] = field(default_factory=list)  # will run
    skipped: list[Provider] = field(default_factory=list)    # unavailable here


def resolve(specs, device, *, no_claim=(), claim=(), expect_variant=(),
            explicit_must_run: bool = True) -> Selection:
    """Providers for `specs` ('auto'/'all' expand), with claims adjusted by name.

    An explicitly named provider that cannot run here raises ValueError when
    `explicit_must_run` (asking for it and silently skipping it would hide a gap);
    unavailable ones reached through auto/all are listed as skipped.
    """
    device = torch.device(device)
    specs = list(specs) or ["auto"]
    expanded: list[tuple[str, bool]] = []
    for spec in specs:
        if spec == "auto":
            expanded += [(s, False) for s in default_specs(device)]
        elif spec == "all":
            expanded += [(s, False) for s in all_specs(device)]
        else:
            expanded.append((spec, True))
    selection = Selection()
    seen = set()
    for spec, explicit in expanded:
        provider = provider_from_spec(spec, device)
        if provider.name in seen:
            continue
        seen.add(provider.name)
        provider = _adjust_claims(provider, no_claim, claim, expect_variant)
        if provider.unavailable:
            if explicit and explicit_must_run:
                raise ValueError(f"provider {provider.name} cannot run here: "
                                 f"{provider.unavailable}")
            selection.skipped.append(provider)
        else:
            selection.providers.append(provider)
    names = {p.name for p in selection.providers + selection.skipped}
    for option, values in (("--no-claim", no_claim), ("--claim", claim),
                           ("--expect-variant", expect_variant)):
        unknown = [v for v in values if v not in names]
        if unknown:
            raise ValueError(f"{option} names providers that are not selected: "
                             f"{', '.join(unknown)} (selected: {', '.join(sorted(names))})")
    return selection


def _adjust_claims(provider: Provider, no_claim, claim, expect_variant) -> Provider:
    name = provider.name
    if name in claim and (name in no_claim or name in expect_variant):
        raise ValueError(f"provider {name} cannot both claim invariance and not")
    if name in expect_variant:
        return replace(provider, claims_invariance=False, expect_variant=True)
    if name in no_claim:
        return replace(provider, claims_invariance=False)
    if name in claim:
        return replace(provider, claims_invariance=True, expect_variant=False)
    return provider


def ab_groups(providers) -> list[list[Provider]]:
    """Providers grouped into pipeline A/B arms (same ab_group), in selection order, the
    fewest stages first (arm A); providers without a group form groups of one."""
    groups: dict[str, list[Provider]] = {}
    order: list[str] = []
    for p in providers:
        key = p.ab_group or f"solo:{p.name}"
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(p)
    result = []
    for key in order:
        arms = groups[key]
        arms.sort(key=lambda p: (p.num_stages is None, p.num_stages or 0))
        result.append(arms)
    return result
