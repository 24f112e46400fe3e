"""The candidate small-N split (`benchmarks/decode_split.py`): a function of (N, K, SM count) only,
one reduction schedule for every M when served, and bit-exact suffix rows under the
interpreter on a shape it splits."""

import pytest
import torch

from det_suite.invariance import providers as prov
from det_suite.invariance.cases import stress_operands
from det_suite.policy import generic, shipped_policy
from det_suite.platform.interpreter import interpreter_active
from det_suite.policy.schedule_identity import schedules_over_m

from benchmarks.decode_split import candidate_entry, candidate_split

SCHEDULE_MS = (1, 2, 15, 16, 17, 31, 32, 33, 64, 65, 128, 129, 256, 257, 1024, 4097)


@pytest.mark.parametrize("n,k,sms,split", [
    (1536, 7168, 132, 3),     # 24 decode tiles: the worst decode cell
    (576, 7168, 132, 3),      # capped by 2048-element chunks
    (3072, 3072, 132, 1),     # K below MIN_CANDIDATE_K
    (3072, 8192, 132, 2),     # K >= MIN_SPLIT_K: the rule's own split
    (5120, 4096, 132, 1),     # 80 decode tiles fill more than half the SMs
    (1536, 7168, 40, 1),      # a small GPU: 24 tiles already fill it
], ids=lambda v: str(v))
def test_candidate_split_follows_n_k_and_sm_count(n, k, sms, split):
    assert candidate_split(n, k, sms) == split


@pytest.mark.parametrize("shape", [(1536, 7168), (576, 7168), (4096, 4096), (64, 4096),
                                   (2048, 7168), (1024, 80)], ids=str)
def test_served_candidate_keeps_one_schedule_for_every_m(monkeypatch, shape):
    monkeypatch.setattr(generic, "generic_entry", candidate_entry)
    policy = shipped_policy("sm90").on_device(132)
    found = schedules_over_m(policy, *shape, SCHEDULE_MS)
    assert len(found) == 1, found


def test_interpreter_suffix_rows_bit_exact_under_the_candidate(monkeypatch, bit_exact):
    if torch.cuda.is_available() and not interpreter_active():
        pytest.skip("interpreter-sized")
    monkeypatch.setattr(generic, "generic_entry", candidate_entry)
    provider = prov.provider_from_spec("det_suite:sm90:sms132", "cpu")
    policy = prov.served_policy("sm90", "cpu", 132)
    assert policy.select(1, 64, 4096).split_k == 2 and policy.entry_origin(64, 4096) == "rule"
    problem, x = stress_operands(64, 4096, 300, device="cpu", dtype="bf16", bias=True)
    args = problem.args()
    full = provider(x, *args)
    ms = (1, 16, 17, 33, 257)
    mismatched = [m for m in ms if not bit_exact(provider(x[-m:], *args), full[-m:])]
    print(f"{len(ms)} suffix comparisons, {len(mismatched)} mismatching")
    assert mismatched == []
