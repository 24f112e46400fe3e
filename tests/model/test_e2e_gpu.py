"""bench e2e on a CUDA GPU (run by the GPU runner): CUDA Graph boots of the stock control
and det mode on the tiny model, with the thermal gate reading NVML before every sample and
the decode floor measured, so every GPU-only part of the report is real."""

import pytest

from det_suite.bench.e2e import EXIT_OK, E2ESettings, bench_e2e, default_arms

pytestmark = [pytest.mark.model, pytest.mark.gpu, pytest.mark.graph]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    settings = E2ESettings(out=str(tmp_path_factory.mktemp("e2e-gpu")),
                           model="synthetic:tiny?seed=0", arms=default_arms(cuda=True),
                           order="ABBA", prefixes=(16,), batches=(1, 2), output_tokens=4,
                           warmup=1, samples=2, page_size=16, device="cuda",
                           max_temp_c=90.0, gate_timeout_s=120.0, gate_poll_s=0.5)
    return bench_e2e(settings)


def test_graph_arms_run_and_make_a_speed_claim(gpu_run):
    assert gpu_run.exit_code == EXIT_OK and gpu_run.payload["complete"]
    assert gpu_run.payload["speed_claim"]
    assert all(b["arm"]["cuda_graph"] for b in gpu_run.payload["boots"])


def test_the_thermal_gate_read_every_sample(gpu_run):
    samples = [s for b in gpu_run.payload["boots"] for s in b["samples"]]
    assert {s["gate"]["status"] for s in samples} <= {"passed", "timeout"}
    for s in samples:
        before, after = s["gate"]["reading"], s["after"]
        assert 0 < before["temp_c"] < 120 and 0 < after["temp_c"] < 120
        assert before["sm_clock_mhz"] > 0 and after["power_w"] > 0
    assert gpu_run.payload["summary"]["thermal"]["available"]


def test_the_decode_floor_is_measured(gpu_run):
    """The floor is a measured copy bandwidth and every batch-1 arm gets a ratio to it. Its
    sign is not asserted: on the tiny model a graph decode step is tens of microseconds,
    and a step is the difference of two requests' times (bench e2e's definition), so the
    requests' noise may exceed the 3 steps here; the 8B model runs measure the claim."""
    import math

    floor = gpu_run.payload["summary"]["floor"]
    assert floor["measured"] and floor["copy_bandwidth_bytes_per_s"] > 1e11
    assert floor["floor_ms"] > 0
    assert {r["arm"] for r in floor["rows"]} == {"control", "det"}
    assert all(math.isfinite(r["floor_ratio"]) for r in floor["rows"])


def test_the_gpu_environment_is_recorded(gpu_run):
    gpu = gpu_run.payload["gpu"]
    assert gpu["available"] and gpu["name"]
    assert gpu.get("nvml") and gpu["driver"] and gpu["power_limit_w"] > 0
