"""The thermal gate: before each timed sample, wait (GPU idle) until the GPU is at or under a
set temperature, with a timeout; record temperature, power draw and SM clock around every
sample. Readings come from NVML (`nvidia-ml-py`, the `nvml` extra). Where NVML or a CUDA
device is missing the gate says so and is reported unavailable: no reading is invented.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable


@dataclass(frozen=True)
class Reading:
    temp_c: float
    power_w: float | None
    sm_clock_mhz: float | None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GateOutcome:
    status: str                 # passed | timeout | unavailable | off
    waited_s: float
    reading: Reading | None     # the reading the gate let the sample start on
    note: str = ""

    def as_dict(self) -> dict:
        return {"status": self.status, "waited_s": round(self.waited_s, 3),
                "reading": self.reading.as_dict() if self.reading else None,
                "note": self.note}


class NvmlSensor:
    """One GPU's readings through NVML; construct through `open_sensor`."""

    def __init__(self, nvml, handle, matched_by: str) -> None:
        self._nvml, self._handle, self.matched_by = nvml, handle, matched_by

    def read(self) -> Reading:
        n, h = self._nvml, self._handle
        temp = float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
        try:
            power = n.nvmlDeviceGetPowerUsage(h) / 1000.0
        except n.NVMLError:
            power = None
        try:
            clock = float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        except n.NVMLError:
            clock = None
        return Reading(temp_c=temp, power_w=power, sm_clock_mhz=clock)


def open_sensor(device) -> tuple[NvmlSensor | None, str]:
    """(sensor, "") for a CUDA `device`, or (None, why there is none)."""
    import torch

    from det_suite.reports.environment import NvmlUnavailable, nvml_handle

    device = torch.device(device)
    if device.type != "cuda":
        return None, (f"no NVML reading on a {device.type} device: the thermal gate needs a "
                      "CUDA GPU")
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        return NvmlSensor(*nvml_handle(index)), ""
    except NvmlUnavailable as exc:
        return None, str(exc)


class ThermalGate:
    """`read()` -> Reading or None; `wait()` before a sample; `sample()` after it.

    `max_temp_c=None` turns the gate off (readings are still recorded where a sensor is).
    `sleep` and `clock` are injectable so the waiting logic is tested without a GPU."""

    def __init__(self, sensor, max_temp_c: float | None, *, timeout_s: float, poll_s: float,
                 unavailable: str = "", sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sensor, self.max_temp_c = sensor, max_temp_c
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self.unavailable = unavailable if sensor is None else ""
        self._sleep, self._clock = sleep, clock

    @property
    def available(self) -> bool:
        return self.sensor is not None

    def read(self) -> Reading | None:
        return self.sensor.read() if self.sensor is not None else None

    def wait(self) -> GateOutcome:
        if self.sensor is None:
            return GateOutcome("unavailable", 0.0, None, self.unavailable)
        start = self._clock()
        reading = self.sensor.read()
        if self.max_temp_c is None:
            return GateOutcome("off", 0.0, reading)
        while reading.temp_c > self.max_temp_c:
            waited = self._clock() - start
            if waited >= self.timeout_s:
                return GateOutcome("timeout", waited, reading,
                                   f"still {reading.temp_c:g} C > {self.max_temp_c:g} C after "
                                   f"{waited:.0f} s; sample taken anyway and flagged")
            self._sleep(self.poll_s)
            reading = self.sensor.read()
        return GateOutcome("passed", self._clock() - start, reading)
