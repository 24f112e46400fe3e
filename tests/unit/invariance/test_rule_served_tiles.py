"""The tiles a GPU serves for shapes no entry names (the generic rule, `TilePolicy.on_device`)
are the tiles proven: one reduction schedule for every M, and bit-exact suffix rows.

CPU: the interpreter runs the rule's own tiles (`det_suite:sm90:smsC` serves them without a
GPU) on small unnamed shapes, one of which the rule splits four ways. A rule that changes
BLOCK_K, the split or the promotion interval with M is a positive control: the schedule
identity and the bit comparison must both flag it.
GPU (sm90): the same suffix comparison on catalog-sized unnamed shapes, served with the
device's own SM count.
"""

import functools
from dataclasses import dataclass, replace

import pytest
import torch

from det_suite.invariance import providers as prov
from det_suite.invariance.cases import stress_operands
from det_suite.policy import shipped_policy
from det_suite.policy import generic
from det_suite.policy.schedule_identity import schedules_over_m

H100_SMS = 132
# Rows that cross every m_tile bound of the rule (16, 32, 256) and both decode BLOCK_Ms.
CPU_FULL_M = 300
CPU_SUFFIX_M = (1, 16, 17, 32, 33, 256, 257)
SCHEDULE_MS = (1, 2, 15, 16, 17, 31, 32, 33, 64, 65, 128, 129, 256, 257, 1024, 4097)
# Unnamed, interpreter-sized: a K tail under BLOCK_K (one padded tile), an N tail with a
# padded second K tile, and K = 8192, which the rule splits 4 ways (1 decode tile on 132
# SMs, 2048-element chunks): decode rows through the workspace, the rest in registers.
CPU_SHAPES = [pytest.param(64, 80, 1, id="n64-k80-tail"),
              pytest.param(96, 336, 1, id="n96-k336-ntail-ktail"),
              pytest.param(64, 8192, 4, id="n64-k8192-split4")]
SPEC = f"det_suite:sm90:sms{H100_SMS}"


def _suffix_mismatches(provider, n, k, full_m, ms, equal, device="cpu"):
    """Ms whose m-row call differs from the same rows at the end of a full_m-row call."""
    problem, x = stress_operands(n, k, full_m, device=device, dtype="bf16", bias=True)
    args = problem.args()
    full = provider(x, *args)
    return [m for m in ms if not equal(provider(x[-m:], *args), full[-m:])]


@dataclass(frozen=True)
class MDependentEntry:
    """A rule's entry whose `select` moves one schedule field for M > 256 (a control)."""

    entry: object
    field_values: tuple

    def select(self, m):
        config = self.entry.select(m)
        return replace(config, **dict(self.field_values)) if m > 256 else config


def _rule_with(monkeypatch, **fields):
    """Serve unnamed shapes with the shipped rule, except `fields` for M > 256."""
    rule = generic.generic_entry

    def m_dependent(family, n, k, sm_count):
        entry = rule(family, n, k, sm_count)
        return None if entry is None else MDependentEntry(entry, tuple(fields.items()))
    monkeypatch.setattr(generic, "generic_entry", m_dependent)


# ---------------------------------------------------------------- the provider spec

def test_sm_count_spec_serves_the_rule_on_the_cpu():
    provider = prov.provider_from_spec(SPEC, "cpu")
    assert provider.name == SPEC and provider.ab_group == SPEC
    assert f"rule for {H100_SMS} SMs" in provider.description


def test_without_an_sm_count_the_cpu_serves_the_default_entry():
    assert prov.served_policy("sm90", "cpu").entry_origin(64, 8192) == "default"
    assert prov.served_policy("sm90", "cpu", H100_SMS).entry_origin(64, 8192) == "rule"


@pytest.mark.parametrize("spec", ["det_suite:sm90:sms0", "det_suite:sm90:smsx"])
def test_bad_sm_count_spec_is_rejected(spec):
    with pytest.raises(ValueError):
        prov.provider_from_spec(spec, "cpu")


# ---------------------------------------------------------------- schedule identity

@pytest.mark.parametrize("n,k,split", CPU_SHAPES)
def test_cpu_shapes_are_served_by_the_rule(n, k, split):
    policy = shipped_policy("sm90").on_device(H100_SMS)
    assert policy.entry_origin(n, k) == "rule"
    configs = [policy.select(m, n, k) for m in CPU_SUFFIX_M + (CPU_FULL_M,)]
    assert {c.split_k for c in configs} == {split}
    # The comparison crosses swapped decode tiles, the middle class and the large tile.
    assert {c.swap_ab for c in configs} == {True, False}
    assert len({(c.block_m, c.block_n) for c in configs}) >= 3


@pytest.mark.parametrize("fields", [dict(block_k=512), dict(split_k=2), dict(promote_k=128)],
                         ids=["block_k", "split_k", "promote_k"])
def test_schedule_check_flags_a_rule_that_moves_a_field_with_m(monkeypatch, fields):
    """Positive control of test_policy_generic's one-schedule-for-every-M check: each
    field that changes the arithmetic, moved with M by the rule, gives two schedules."""
    policy = shipped_policy("sm90").on_device(H100_SMS)
    assert len(schedules_over_m(policy, 64, 8192, SCHEDULE_MS)) == 1
    _rule_with(monkeypatch, **fields)
    found = schedules_over_m(policy, 64, 8192, SCHEDULE_MS)
    print(f"{len(SCHEDULE_MS)} row counts, {len(found)} schedules: {found}")
    assert len(found) == 2


# ---------------------------------------------------------------- bits, on the interpreter

@pytest.fixture
def interpreter_only(device):
    if device != "cpu":
        pytest.skip("interpreter-sized; the GPU runs the sm90 cases below")


@pytest.mark.usefixtures("interpreter_only")
@pytest.mark.parametrize("n,k,split", CPU_SHAPES)
def test_rule_served_suffix_rows_bit_exact(n, k, split, bit_exact):
    provider = prov.provider_from_spec(SPEC, "cpu")
    mismatched = _suffix_mismatches(provider, n, k, CPU_FULL_M, CPU_SUFFIX_M, bit_exact)
    print(f"{len(CPU_SUFFIX_M)} suffix comparisons on {provider.name}, "
          f"{len(mismatched)} mismatching")
    assert mismatched == []


@pytest.mark.usefixtures("interpreter_only")
def test_rule_served_comparison_flags_a_rule_that_changes_block_k_with_m(monkeypatch,
                                                                         bit_exact):
    """Counterpart: BLOCK_K 512 above M = 256 keeps the K partition (the old schedule
    identity saw nothing) but regroups the sum, so suffixes of up to 256 rows differ from
    the 300-row call (a single row may round alike by chance: most must differ, and none
    above 256, which shares the full call's tiles)."""
    _rule_with(monkeypatch, block_k=512)
    provider = prov.provider_from_spec(SPEC, "cpu")
    mismatched = _suffix_mismatches(provider, 64, 8192, CPU_FULL_M, CPU_SUFFIX_M, bit_exact)
    print(f"{len(CPU_SUFFIX_M)} suffix comparisons, {len(mismatched)} mismatching: "
          f"{mismatched}")
    small = [m for m in CPU_SUFFIX_M if m <= 256]
    assert set(mismatched) <= set(small) and len(mismatched) >= len(small) - 1


# ---------------------------------------------------------------- GPU, rule-served shapes

GPU_FULL_M = 4097
GPU_SUFFIX_M = (1, 7, 16, 17, 32, 33, 64, 129, 256, 257, 1000)
# Catalog-sized shapes no SM90 entry names: a split the rule picks from (N, K, SM count)
# (2048x8192: 4 chunks on 132 SMs), small N with large K, and the K=80 tail.
GPU_SHAPES = [(2048, 8192), (1536, 7168), (2560, 9728), (4000, 80)]
GPU_CASES = [pytest.param(n, k, m, id=f"{n}x{k}-m{m}") for n, k in GPU_SHAPES
             for m in GPU_SUFFIX_M]


@functools.lru_cache(maxsize=1)
def _gpu_full_call(n, k):
    provider = prov.provider_from_spec("det_suite:sm90", "cuda")
    problem, x = stress_operands(n, k, GPU_FULL_M, device="cuda", dtype="bf16", bias=True)
    return provider, problem, x, provider(x, *problem.args())


@pytest.mark.gpu
@pytest.mark.sm90
@pytest.mark.parametrize("n,k,m", GPU_CASES)
def test_gpu_rule_served_suffix_rows_bit_exact(n, k, m, bit_exact):
    provider, problem, x, full = _gpu_full_call(n, k)
    policy = prov.served_policy("sm90", "cuda")
    assert policy.entry_origin(n, k) == "rule"
    assert bit_exact(provider(x[-m:], *problem.args()), full[-m:])


# ---------------------------------------------------------------- warp-specialised tiles

def test_ws_spec_names_the_warp_specialized_provider():
    provider = prov.provider_from_spec(f"{SPEC}:ws", "cpu")
    assert provider.name == f"{SPEC}:ws" and provider.claims_invariance is False  # sm120 CPU


@pytest.mark.usefixtures("interpreter_only")
def test_ws_provider_gives_the_served_bits_on_the_interpreter(bit_exact):
    """On the CPU its tiles run the TMA kernel (the interpreter has no Gluon), so it must
    give the served table's bits exactly; on an SM90 GPU the invariance matrix compares
    the kernel itself (`det-suite invariance --providers det_suite:sm90:ws`)."""
    plain, ws = (prov.provider_from_spec(s, "cpu") for s in (SPEC, f"{SPEC}:ws"))
    problem, x = stress_operands(96, 336, CPU_FULL_M, device="cpu", dtype="bf16", bias=True)
    assert bit_exact(ws(x, *problem.args()), plain(x, *problem.args()))
