"""The thermal gate: waits while the GPU is above the limit, gives up at the timeout with the
sample flagged, and says "unavailable" (with why) where there is no sensor - never a made-up
reading."""

import pytest

from det_suite.bench.e2e.thermal import Reading, ThermalGate, open_sensor


class FakeSensor:
    def __init__(self, temps):
        self.temps = list(temps)
        self.reads = 0

    def read(self):
        temp = self.temps[min(self.reads, len(self.temps) - 1)]
        self.reads += 1
        return Reading(temp_c=temp, power_w=100.0 + temp, sm_clock_mhz=1980.0)


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self):
        return self.now


def _gate(temps, max_c=55.0, timeout_s=10.0, poll_s=1.0):
    sensor, time = FakeSensor(temps), FakeTime()
    gate = ThermalGate(sensor, max_c, timeout_s=timeout_s, poll_s=poll_s, sleep=time.sleep,
                       clock=time.clock)
    return gate, sensor, time


def test_gate_waits_until_at_or_under_the_limit():
    gate, sensor, time = _gate([70.0, 60.0, 55.0, 40.0])
    outcome = gate.wait()
    assert outcome.status == "passed"
    assert outcome.reading.temp_c == 55.0          # "at or under": 55 passes a 55 C gate
    assert time.sleeps == [1.0, 1.0] and outcome.waited_s == 2.0
    assert sensor.reads == 3


def test_gate_passes_at_once_when_cool():
    gate, _, time = _gate([41.0])
    outcome = gate.wait()
    assert outcome.status == "passed" and outcome.waited_s == 0.0 and time.sleeps == []


def test_gate_times_out_and_flags_the_sample():
    gate, _, time = _gate([80.0], timeout_s=5.0, poll_s=2.0)
    outcome = gate.wait()
    assert outcome.status == "timeout"
    assert outcome.waited_s >= 5.0 and sum(time.sleeps) == outcome.waited_s
    assert "80 C > 55 C" in outcome.note and "flagged" in outcome.note


def test_gate_off_still_records_the_reading():
    gate, _, time = _gate([90.0], max_c=None)
    outcome = gate.wait()
    assert outcome.status == "off" and outcome.reading.temp_c == 90.0 and time.sleeps == []


def test_without_a_sensor_the_gate_is_unavailable_not_faked():
    gate = ThermalGate(None, 55.0, timeout_s=10, poll_s=1, unavailable="no CUDA device")
    outcome = gate.wait()
    assert (outcome.status, outcome.reading, outcome.note) == ("unavailable", None,
                                                               "no CUDA device")
    assert gate.read() is None and not gate.available
    assert outcome.as_dict() == {"status": "unavailable", "waited_s": 0.0, "reading": None,
                                 "note": "no CUDA device"}


def test_open_sensor_on_a_cpu_device_says_why_there_is_none():
    sensor, why = open_sensor("cpu")
    assert sensor is None and "needs a CUDA GPU" in why


@pytest.mark.parametrize("temps, expected_reads", [([50.0], 1), ([60.0, 50.0], 2)],
                         ids=["cool", "one-poll"])
def test_readings_carry_power_and_clock(temps, expected_reads):
    gate, sensor, _ = _gate(temps)
    reading = gate.wait().reading
    assert reading.as_dict() == {"temp_c": 50.0, "power_w": 150.0, "sm_clock_mhz": 1980.0}
    assert sensor.reads == expected_reads
