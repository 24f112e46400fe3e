"""Invariance providers: names, claims, the op-level call contract, guarded vendor lookups.

CPU: det-suite's kernels on the Triton interpreter, small shapes.
"""

import sys
import types

import pytest
import torch

from det_suite.platform.family import device_family
from det_suite.platform.hardware import importable
from det_suite.invariance import providers as prov
from det_suite.invariance.cases import Case, Shape, apply_layout, make_problem, make_rows

DEVICE = "cpu"
NATIVE = device_family(torch.device(DEVICE))  # sm120 on the interpreter
FOREIGN = "sm90" if NATIVE != "sm90" else "sm120"


def custom_linear(x, weight_nk, weight_scale, input_scale, bias):
    """A module:function provider for these tests (invariant by construction)."""
    return prov.reference_rowwise(x, weight_nk, weight_scale, input_scale, bias)


not_callable = 42


# ---------------------------------------------------------------- names and claims

@pytest.mark.parametrize("spec,name,claims,control,stages", [
    pytest.param("det_suite", f"det_suite:{NATIVE}", True, False, None, id="det_suite-native"),
    pytest.param(f"det_suite:{NATIVE}:s2", f"det_suite:{NATIVE}:s2", True, False, 2,
                 id="det_suite-native-s2"),
    pytest.param("det_suite:s3", f"det_suite:{NATIVE}:s3", True, False, 3,
                 id="det_suite-s3-native-family"),
    pytest.param(f"det_suite:{FOREIGN}", f"det_suite:{FOREIGN}", False, False, None,
                 id="det_suite-foreign-table-measured"),
    pytest.param("control", "control", False, True, None, id="positive-control"),
    pytest.param("reference_rowwise", "reference_rowwise", True, False, None,
                 id="negative-control"),
    pytest.param("bf16_linear", "bf16_linear", False, False, None, id="bf16-measured"),
    pytest.param("torch_scaled_mm", "torch_scaled_mm", False, False, None,
                 id="vendor-measured"),
    pytest.param(f"{__name__}:custom_linear",
                 f"{__name__}:custom_linear", True, False, None,
                 id="custom-claims-by-default"),
])
def test_spec_resolves_to_provider_with_claims(spec, name, claims, control, stages):
    p = prov.provider_from_spec(spec, DEVICE)
    assert (p.name, p.claims_invariance, p.expect_variant, p.num_stages) == \
        (name, claims, control, stages)


@pytest.mark.parametrize("spec", [
    pytest.param("nope", id="unknown-name"),
    pytest.param("det_suite:sm77", id="unknown-family"),
    pytest.param("det_suite:s9", id="unsupported-stages"),
    pytest.param("det_suite:sm90:sm120", id="two-families"),
    pytest.param("no_such_module_xyz:fn", id="custom-module-missing"),
    pytest.param(f"{__name__}:missing", id="custom-attr-missing"),
    pytest.param(f"{__name__}:not_callable", id="custom-not-callable"),
])
def test_bad_spec_raises_value_error(spec):
    with pytest.raises(ValueError):
        prov.provider_from_spec(spec, DEVICE)


@pytest.mark.parametrize("option,claims,control", [
    pytest.param({}, True, False, id="default-claims"),
    pytest.param({"no_claim": [f"{__name__}:custom_linear"]}, False, False,
                 id="no-claim"),
    pytest.param({"expect_variant": [f"{__name__}:custom_linear"]}, False, True,
                 id="expect-variant"),
])
def test_resolve_adjusts_claims_by_name(option, claims, control):
    selection = prov.resolve([f"{__name__}:custom_linear"], DEVICE, **option)
    p = selection.providers[0]
    assert (p.claims_invariance, p.expect_variant) == (claims, control)


def test_claim_makes_measured_provider_claim():
    p = prov.resolve(["bf16_linear"], DEVICE, claim=["bf16_linear"]).providers[0]
    assert p.claims_invariance


def test_claim_and_no_claim_together_rejected():
    with pytest.raises(ValueError, match="both"):
        prov.resolve(["bf16_linear"], DEVICE, claim=["bf16_linear"], no_claim=["bf16_linear"])


def test_claim_option_naming_unselected_provider_rejected():
    with pytest.raises(ValueError, match="not selected"):
        prov.resolve(["bf16_linear"], DEVICE, no_claim=["control"])


def test_positive_control_cannot_claim_invariance():
    with pytest.raises(ValueError, match="positive control"):
        prov.Provider("x", custom_linear, "", claims_invariance=True, expect_variant=True)


# ---------------------------------------------------------------- selection on the CPU

def test_auto_on_cpu_has_ab_arms_foreign_table_controls_and_no_vendors():
    names = [p.name for p in prov.resolve(["auto"], DEVICE).providers]
    assert names[:2] == [f"det_suite:{NATIVE}:s2", f"det_suite:{NATIVE}:s3"]
    assert f"det_suite:{FOREIGN}" in names and "control" in names and "bf16_linear" in names
    assert not set(names) & {"torch_scaled_mm", "sglang_fp8_scaled_mm", "flashinfer_bmm_fp8"}


def test_named_provider_that_cannot_run_here_is_an_error():
    with pytest.raises(ValueError, match="cannot run here"):
        prov.resolve(["flashinfer_bmm_fp8"], DEVICE)


def test_all_lists_unavailable_providers_as_skipped_with_reason():
    selection = prov.resolve(["all"], DEVICE)
    skipped = {p.name: p.unavailable for p in selection.skipped}
    assert "flashinfer_bmm_fp8" in skipped and skipped["flashinfer_bmm_fp8"]
    assert "control" in {p.name for p in selection.providers}


def test_ab_groups_put_arms_of_one_table_together_fewest_stages_first():
    providers = prov.resolve([f"det_suite:{NATIVE}:s3", "bf16_linear",
                              f"det_suite:{NATIVE}:s2", f"det_suite:{NATIVE}"], DEVICE).providers
    groups = [[p.name for p in g] for g in prov.ab_groups(providers)]
    assert groups == [[f"det_suite:{NATIVE}:s2", f"det_suite:{NATIVE}:s3",
                       f"det_suite:{NATIVE}"], ["bf16_linear"]]


def test_control_schedule_changes_with_m():
    small, large = prov.control_config(32), prov.control_config(33)
    assert (small.block_k, small.split_k) != (large.block_k, large.split_k)
    assert prov.control_config(1) == small and prov.control_config(8192) == large


# ---------------------------------------------------------------- SGLang apply (guarded)

def _fake_sglang(monkeypatch, fn):
    names = ["sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.quantization",
             prov.SGLANG_APPLY_MODULE]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[prov.SGLANG_APPLY_MODULE].apply_fp8_linear = fn


def test_sglang_apply_missing_is_unavailable_naming_module():
    if "sglang" in sys.modules or importable("sglang"):
        pytest.skip("sglang is installed here")
    p = prov.provider_from_spec("sglang_apply_fp8_linear", DEVICE)
    assert p.unavailable and prov.SGLANG_APPLY_MODULE.split(".")[0] in p.unavailable


def test_sglang_apply_with_other_signature_fails_loudly(monkeypatch):
    def apply_fp8_linear(x, w, scale):  # an API that moved on
        raise AssertionError("must not be called")
    _fake_sglang(monkeypatch, apply_fp8_linear)
    with pytest.raises(TypeError, match="input_scale"):
        prov.provider_from_spec("sglang_apply_fp8_linear", DEVICE)


def test_sglang_apply_gets_kn_weight_and_2d_input(monkeypatch):
    seen = {}

    def apply_fp8_linear(input, weight, weight_scale, input_scale=None, bias=None, **_):
        seen.update(input=input.shape, weight=weight.shape, bias=bias)
        return torch.zeros(input.shape[0], weight.shape[1], dtype=input.dtype)
    _fake_sglang(monkeypatch, apply_fp8_linear)
    p = prov.provider_from_spec("sglang_apply_fp8_linear", DEVICE)
    w = torch.zeros(48, 32).to(torch.float8_e4m3fn)
    y = p(torch.zeros(1, 5, 32, dtype=torch.bfloat16), w, torch.ones(1), torch.ones(1), None)
    assert seen["input"] == (5, 32) and seen["weight"] == (32, 48) and y.shape == (1, 5, 48)


# ---------------------------------------------------------------- the call contract

def _scaled_mm_on_cpu() -> bool:
    try:
        a = torch.zeros(1, 16).to(torch.float8_e4m3fn)
        torch._scaled_mm(a, torch.zeros(16, 16).to(torch.float8_e4m3fn).t(),
                         scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0),
                         out_dtype=torch.bfloat16)
        return True
    except Exception:
        return False


CONTRACT_PROVIDERS = [
    pytest.param(f"det_suite:{NATIVE}", id="det_suite-native"),
    pytest.param(f"det_suite:{FOREIGN}:s2", id="det_suite-foreign-s2"),
    pytest.param("control", id="control"),
    pytest.param("reference_rowwise", id="reference"),
    pytest.param("bf16_linear", id="bf16_linear"),
    pytest.param("torch_scaled_mm", id="torch_scaled_mm", marks=pytest.mark.skipif(
        not _scaled_mm_on_cpu(), reason="torch._scaled_mm has no CPU kernel in this torch "
                                        "(it is measured on the GPU)")),
]


@pytest.mark.parametrize("layout,bias,dtype", [
    pytest.param("contiguous", False, "bf16", id="2d-bf16"),
    pytest.param("strided3d", True, "fp16", id="strided3d-bias-fp16"),
])
@pytest.mark.parametrize("spec", CONTRACT_PROVIDERS)
def test_provider_returns_x_dtype_and_shape_close_to_fp32(spec, layout, bias, dtype):
    case = Case(Shape("t", 48, 80), dtype, bias, layout, 0, "calibrated")
    problem = make_problem(case, DEVICE)
    x = apply_layout(make_rows(problem, case, 5, "contract", DEVICE), case.layout)
    y = prov.provider_from_spec(spec, DEVICE)(x, *problem.args())
    ref = prov.reference_rowwise(x, *problem.args())
    assert y.dtype == case.torch_dtype and y.shape == x.shape[:-1] + (48,)
    if spec == "bf16_linear":  # unquantized activations: a different function, same size
        ref_scale = ref.float().abs().max()
        assert (y.float() - ref.float()).abs().max() <= 0.1 * ref_scale
    else:
        tol = 2.0 ** -6 * ref.float().abs() + 1e-3 * ref.float().abs().max()
        assert ((y.float() - ref.float()).abs() <= tol).all()
