"""From boot records to the numbers the e2e report states: pooled and per-boot medians,
ranges, arm / A ratios, the decode floor, the thermal record and the opt-in gates."""

import pytest

from det_suite.bench.e2e.arms import Arm, E2ESettings
from det_suite.bench.e2e.boot import run_boot
from det_suite.bench.e2e.summary import gate_failures, summarize, thermal_summary
from tests.unit.bench.test_e2e_boot import VOCAB, FakeBackend, FakeClock, no_gate

ARMS = (Arm("control", mode="stock", cuda_graph=True), Arm("det", mode="det", cuda_graph=True))
SLOWDOWN = {"control": 1.0, "det": 1.25}


def _settings(tmp_path, **overrides):
    values = dict(arms=ARMS, prefixes=(8, 16), batches=(1, 2), output_tokens=5, warmup=1,
                  samples=3)
    return E2ESettings(out=str(tmp_path), **{**values, **overrides})


def _record(plan, index, arm, *, floor=None, slowdown=None):
    clock = FakeClock()
    backend = FakeBackend(clock, slowdown=slowdown or SLOWDOWN[arm.name])
    samples = run_boot(backend, plan, vocab=VOCAB, gate=no_gate(), clock=clock)
    return {"index": index, "letter": "AB"[index % 2], "arm": arm.as_dict(),
            "thermal_gate": {"available": False, "reason": "no sensor (test)",
                             "max_temp_c": 55.0},
            "floor": floor or {"weight_bytes": 1000, "measured": False, "reason": "no GPU"},
            "samples": samples}


def _boots(settings, **kwargs):
    plan = settings.plan()
    return plan, [_record(plan, i, settings.arms[a], **kwargs)
                  for i, a in enumerate(settings.boot_arms)]


def test_pooled_and_boot_medians_per_arm_and_cell(tmp_path):
    plan, boots = _boots(_settings(tmp_path))
    cell = summarize(plan, boots)["cells"][(16, 2)]
    e2e = cell["arms"]["det"]["e2e_ms"]
    expected = 1.25 * (0.125 * 2 + 0.0625 * 4) * 1e3
    assert e2e["median"] == expected and e2e["samples"] == 6
    assert e2e["boot_medians"] == [expected, expected]
    assert e2e["boot_ranges"] == [[expected, expected]] * 2
    assert cell["arms"]["control"]["boots"] == [0, 3] and cell["arms"]["det"]["boots"] == [1, 2]


def test_ratios_to_arm_a_with_their_interval(tmp_path):
    plan, boots = _boots(_settings(tmp_path))
    for cell in summarize(plan, boots)["cells"].values():
        for metric in ("e2e_ms", "prefill_ms", "decode_ms_per_step"):
            assert cell["ratios"]["det"][metric] == {"ratio": 1.25, "ci95": [1.25, 1.25]}
        assert "control" not in cell["ratios"]


def test_warmups_are_kept_but_never_counted(tmp_path):
    plan, boots = _boots(_settings(tmp_path))
    for boot in boots:
        for s in boot["samples"]:
            if s["warmup"]:
                s["e2e_ms"] = 1e9
    cell = summarize(plan, boots)["cells"][(8, 1)]
    assert cell["arms"]["control"]["e2e_ms"]["range"][1] < 1e9
    assert sum(s["e2e_ms"] == 1e9 for b in boots for s in b["samples"]) == 16


def test_decode_floor_rows_are_the_batch_1_cells(tmp_path):
    floor = {"weight_bytes": 8_000_000_000, "measured": True,
             "copy_bandwidth_bytes_per_s": 4e12, "floor_ms": 2.0}
    plan, boots = _boots(_settings(tmp_path), floor=floor)
    summary = summarize(plan, boots)["floor"]
    assert summary["floor_ms"] == 2.0
    assert {(r["arm"], r["prefix"]) for r in summary["rows"]} == {
        (a, p) for a in ("control", "det") for p in (8, 16)}
    det = next(r for r in summary["rows"] if r["arm"] == "det")
    assert det["floor_ratio"] == det["decode_ms_per_step"] / 2.0


def test_an_unmeasured_floor_says_why(tmp_path):
    plan, boots = _boots(_settings(tmp_path))
    floor = summarize(plan, boots)["floor"]
    assert floor == {"weight_bytes": 1000, "measured": False, "reason": "no GPU", "rows": []}


@pytest.mark.parametrize("max_ratio, failing", [(1.3, 0), (1.2, 4)],
                         ids=["ratio-within", "ratio-over-in-every-cell"])
def test_ratio_gate(tmp_path, max_ratio, failing):
    plan, boots = _boots(_settings(tmp_path))
    failures = gate_failures(summarize(plan, boots), max_ratio=max_ratio,
                             max_decode_floor_ratio=None)
    assert len(failures) == failing
    assert all("det / control end to end" in f and "1.250 > 1.2" in f for f in failures)


def test_floor_gate_needs_a_measured_floor(tmp_path):
    plan, boots = _boots(_settings(tmp_path))
    failures = gate_failures(summarize(plan, boots), max_ratio=None, max_decode_floor_ratio=1.5)
    assert failures == ["decode floor: no batch-1 CUDA Graph decode measured against a "
                        "measured floor (no GPU)"]


@pytest.mark.parametrize("floor_ms, failing", [(80.0, 0), (40.0, 4)],
                         ids=["within-floor", "over-floor"])
def test_floor_gate_on_graph_decode_steps(tmp_path, floor_ms, failing):
    floor = {"weight_bytes": 1, "measured": True, "copy_bandwidth_bytes_per_s": 1.0,
             "floor_ms": floor_ms}
    plan, boots = _boots(_settings(tmp_path), floor=floor)
    # control steps take 62.5 ms, det 78.125 ms; floor_ms is weight / bandwidth (recomputed)
    for b in boots:
        b["floor"]["copy_bandwidth_bytes_per_s"] = 1e3 / floor_ms
    failures = gate_failures(summarize(plan, boots), max_ratio=None,
                             max_decode_floor_ratio=1.5)
    assert len(failures) == failing


def test_thermal_summary_counts_outcomes_and_peaks():
    reading = lambda t, p, c: {"temp_c": t, "power_w": p, "sm_clock_mhz": c}  # noqa: E731
    samples = [{"gate": {"status": "passed", "waited_s": 3.0, "reading": reading(54, 90, 1980)},
                "after": reading(61, 420, 1755)},
               {"gate": {"status": "timeout", "waited_s": 600.0,
                         "reading": reading(58, 95, 1980)}, "after": reading(66, 430, 1740)}]
    boots = [{"thermal_gate": {"available": True, "reason": "", "max_temp_c": 55.0},
              "samples": samples}]
    t = thermal_summary(boots)
    assert t["statuses"] == {"passed": 1, "timeout": 1} and t["available"]
    assert (t["peak_temp_c"], t["peak_power_w"], t["sm_clock_mhz_range"]) == (66, 430,
                                                                             [1740, 1980])
    assert t["waited_s_total"] == 603.0


def test_the_floor_section_gives_the_controls_step_over_each_arms(tmp_path):
    from det_suite.bench.e2e.render import _floor_lines

    floor = {"weight_bytes": 8_000_000_000, "measured": True,
             "copy_bandwidth_bytes_per_s": 4e12, "floor_ms": 2.0, "bandwidth_per_boot": [4e12],
             "rows": [{"arm": a, "cuda_graph": True, "prefix": 128, "decode_ms_per_step": ms,
                       "floor_ratio": ms / 2.0} for a, ms in (("stock", 3.4), ("det", 2.92))]}
    lines = _floor_lines(floor, "stock")
    assert "- stock / det at prefix 128 (graph): 1.164" in lines
    assert not any(line.startswith("- stock / stock") for line in lines)
    assert _floor_lines(floor, None)[-1].startswith("|")   # no control named: no lines
