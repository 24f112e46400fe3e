"""What one boot measures (bench/e2e/boot.py), on a fake backend whose requests advance a
fake clock by known amounts: prefill, decode step and end to end come out exactly, the cache
is flushed before every request, warm-ups are flagged, and a cache hit or a short output
stops the boot instead of becoming a measurement.

The fakes here are imported by test_e2e_job.py (tests/unit is on sys.path)."""

from dataclasses import dataclass

import pytest

from det_suite.backends.interface import Completion
from det_suite.bench.e2e.arms import E2ESettings
from det_suite.bench.e2e.boot import cell_requests, engine_limits, run_boot
from det_suite.bench.e2e.thermal import ThermalGate

PREFILL_S_PER_ROW = 0.125      # binary fractions: every timing below is exact in floats
DECODE_S_PER_STEP = 0.0625
VOCAB = 97


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeBackend:
    """Requests cost PREFILL_S_PER_ROW per batch row plus DECODE_S_PER_STEP per decode step
    (times `slowdown`); tracks flushes; can misbehave on request."""

    name = "fake"

    def __init__(self, clock, *, slowdown=1.0, cached_tokens=0, short_by=0):
        self.clock, self.slowdown = clock, slowdown
        self.cached_tokens, self.short_by = cached_tokens, short_by
        self.flushed, self.unflushed_requests, self.calls = False, 0, []

    def flush_cache(self):
        self.flushed = True

    def generate(self, requests):
        if not self.flushed:
            self.unflushed_requests += 1
        self.flushed = False
        n = requests[0].max_new_tokens
        self.calls.append((len(requests), n))
        self.clock.now += self.slowdown * (PREFILL_S_PER_ROW * len(requests)
                                           + DECODE_S_PER_STEP * (n - 1))
        tokens = n - self.short_by if n > 1 else n   # the full request comes up short
        return [Completion(output_ids=tuple(range(tokens)), logprobs=(), cached_tokens=
                           self.cached_tokens) for _ in requests]

    def close(self):
        pass


def no_gate():
    return ThermalGate(None, 55.0, timeout_s=1.0, poll_s=1.0, unavailable="no sensor (test)")


def plan(tmp_path, **overrides):
    values = dict(prefixes=(8, 16), batches=(1, 2), output_tokens=5, warmup=1, samples=3)
    return E2ESettings(out=str(tmp_path), **{**values, **overrides}).plan()


@dataclass
class Boot:
    samples: list
    backend: FakeBackend


def run_fake_boot(tmp_path, **kwargs) -> Boot:
    clock = FakeClock()
    backend = FakeBackend(clock, **kwargs.pop("backend", {}))
    samples = run_boot(backend, plan(tmp_path, **kwargs), vocab=VOCAB, gate=no_gate(),
                       clock=clock)
    return Boot(samples, backend)


def test_prefill_decode_and_end_to_end_are_measured_exactly(tmp_path):
    boot = run_fake_boot(tmp_path)
    for s in boot.samples:
        prefill = PREFILL_S_PER_ROW * s["batch"] * 1e3
        assert s["prefill_ms"] == prefill
        assert s["e2e_ms"] == prefill + DECODE_S_PER_STEP * 4 * 1e3
        assert s["decode_ms_per_step"] == DECODE_S_PER_STEP * 1e3


def test_every_cell_gets_warmups_then_samples_flagged(tmp_path):
    samples = run_fake_boot(tmp_path).samples
    cells = [(s["prefix"], s["batch"]) for s in samples]
    assert cells == [(p, b) for p in (8, 16) for b in (1, 2) for _ in range(4)]
    assert [s["warmup"] for s in samples[:4]] == [True, False, False, False]
    assert [s["index"] for s in samples[:4]] == [0, 1, 2, 3]


def test_each_sample_is_a_prefill_request_then_a_full_request_both_after_a_flush(tmp_path):
    boot = run_fake_boot(tmp_path, prefixes=(8,), batches=(2,), warmup=0, samples=2)
    assert boot.backend.calls == [(2, 1), (2, 5), (2, 1), (2, 5)]
    assert boot.backend.unflushed_requests == 0


def test_samples_record_the_gate_and_the_outputs(tmp_path):
    s = run_fake_boot(tmp_path, prefixes=(8,), batches=(1,), warmup=0, samples=1).samples[0]
    assert s["gate"] == {"status": "unavailable", "waited_s": 0.0, "reading": None,
                         "note": "no sensor (test)"}
    assert s["after"] is None
    assert s["output_tokens"] == 5 and len(s["output_sha256"]) == 16


def test_a_cache_hit_stops_the_boot(tmp_path):
    with pytest.raises(RuntimeError, match="reported 4 cached tokens after a cache flush"):
        run_fake_boot(tmp_path, backend={"cached_tokens": 4})


def test_a_short_output_stops_the_boot(tmp_path):
    with pytest.raises(RuntimeError, match="returned 3 tokens, expected exactly 5"):
        run_fake_boot(tmp_path, backend={"short_by": 2})


def test_events_report_every_sample(tmp_path):
    clock, events = FakeClock(), []
    run_boot(FakeBackend(clock), plan(tmp_path, prefixes=(8,), batches=(1,)), vocab=VOCAB,
             gate=no_gate(), clock=clock, emit=events.append)
    assert [e["event"] for e in events] == ["sample"] * 4
    assert [e["warmup"] for e in events] == [True, False, False, False]


def test_cell_requests_are_seeded_by_the_cell_and_distinct_within_a_batch():
    a = cell_requests(0, 16, 4, VOCAB, 5)
    assert a == cell_requests(0, 16, 4, VOCAB, 5)
    assert len({r.prompt_ids for r in a}) == 4
    assert all(len(r.prompt_ids) == 16 and r.max_new_tokens == 5 for r in a)
    assert all(0 <= t < VOCAB for r in a for t in r.prompt_ids)
    assert cell_requests(1, 16, 4, VOCAB, 5) != a


@pytest.mark.parametrize("prefixes, batches, tokens, page, expected", [
    ((128, 2048), (1, 4), 32, 16, {"max_seq_len": 2080, "num_pages": 2 * 130 * 4 + 1}),
    ((8,), (1, 2), 3, 4, {"max_seq_len": 12, "num_pages": 2 * 3 * 2 + 1}),
], ids=["seed-cells", "cpu-cells"])
def test_engine_limits_fit_the_largest_cell(prefixes, batches, tokens, page, expected):
    assert engine_limits(prefixes, batches, tokens, page) == expected
