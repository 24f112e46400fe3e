"""One boot, in its own process: `python -m det_suite.bench.e2e.worker JOB.json OUT.json`.

A fresh process per boot gives each boot a fresh CUDA context, allocator and compiled-kernel
state, the way a restarted engine or server starts. The process loads the model, opens the
arm's backend, runs every cell (`boot.run_boot`), measures the copy bandwidth for the decode
floor (CUDA only), and writes its record atomically to OUT.json: a boot is on disk whole or
not at all. Progress goes to stdout as one `EVENT_PREFIX {json}` line per event. If the
parent that started it goes away (killed, interrupted), the boot stops at the next sample.
"""

from __future__ import annotations

import json
import os
import sys
import time

from det_suite.bench.e2e.processes import BOOT_SCHEMA, EVENT_PREFIX


class ParentGone(SystemExit):
    pass


def _emitter(parent_pid: int):
    def emit(event: dict) -> None:
        if os.getppid() != parent_pid:
            raise ParentGone("det-suite e2e boot: the parent process is gone; stopping")
        print(f"{EVENT_PREFIX} {json.dumps(event)}", flush=True)
    return emit


def _floor(plan: dict, device, checkpoint) -> dict:
    from det_suite.bench.e2e.boot import weight_bytes
    from det_suite.bench.timing import copy_bandwidth, gpu_problem

    nbytes = weight_bytes(checkpoint)
    if not plan["measure_floor"]:
        return {"weight_bytes": nbytes, "measured": False, "reason": "not requested"}
    problem = gpu_problem("the decode floor's copy-bandwidth probe")
    if problem or device.type != "cuda":
        return {"weight_bytes": nbytes, "measured": False,
                "reason": problem or f"device {device} is not a CUDA GPU"}
    bandwidth = copy_bandwidth()
    return {"weight_bytes": nbytes, "measured": True, "copy_bandwidth_bytes_per_s": bandwidth,
            "floor_ms": nbytes / bandwidth * 1e3}


def run_job(job: dict, emit) -> dict:
    """The boot's record (what OUT.json holds)."""
    import torch

    from det_suite.backends.open import open_backend
    from det_suite.bench.e2e.boot import engine_limits, run_boot
    from det_suite.bench.e2e.thermal import ThermalGate, open_sensor
    from det_suite.engine.opsets import det_opset
    from det_suite.models.spec import load_model
    from det_suite.reports.environment import environment, gpu_details, package_versions

    plan, arm = job["plan"], job["arm"]
    started = time.time()
    device = torch.device(plan["device"] or ("cuda" if torch.cuda.is_available() else "cpu"))
    emit({"event": "loading", "device": str(device), "pid": os.getpid()})
    t0 = time.perf_counter()
    checkpoint = load_model(plan["model"], device=device)
    load_s = time.perf_counter() - t0
    options = engine_limits(plan["prefixes"], plan["batches"], plan["output_tokens"],
                            plan["page_size"])
    if arm["stages"] is not None:
        options["ops"] = det_opset(arm["stages"])
    t0 = time.perf_counter()
    backend = open_backend(arm["backend"], plan["model"], mode=arm["mode"],
                           cuda_graph=arm["cuda_graph"], device=device, checkpoint=checkpoint,
                           page_size=plan["page_size"], **options)
    open_s = time.perf_counter() - t0
    sensor, unavailable = open_sensor(device)
    gate = ThermalGate(sensor, plan["max_temp_c"], timeout_s=plan["gate_timeout_s"],
                       poll_s=job.get("gate_poll_s", 1.0), unavailable=unavailable)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    emit({"event": "ready", "load_s": load_s, "open_s": open_s})
    try:
        t0 = time.perf_counter()
        samples = run_boot(backend, plan, vocab=checkpoint.config.vocab_size, gate=gate,
                           sync=sync, emit=emit)
        run_s = time.perf_counter() - t0
    finally:
        backend.close()
    floor = _floor(plan, device, checkpoint)
    return {
        "schema": BOOT_SCHEMA, "index": job["index"], "letter": job["letter"], "arm": arm,
        "backend": getattr(backend, "name", arm["backend"]), "device": str(device),
        "started_unix": started, "finished_unix": time.time(),
        "load_s": load_s, "open_s": open_s, "run_s": run_s, "pid": os.getpid(),
        "thermal_gate": {"available": gate.available, "reason": gate.unavailable,
                         "max_temp_c": plan["max_temp_c"]},
        "gpu": gpu_details(device.index or 0) if device.type == "cuda" else
        {"available": False, "reason": f"device {device}"},
        "packages": package_versions(), "environment": environment(),
        "floor": floor, "samples": samples,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m det_suite.bench.e2e.worker JOB.json OUT.json", file=sys.stderr)
        return 2
    from det_suite.platform.interpreter import default_to_interpreter, interpreter_for_cpu_run
    from det_suite.reports.files import write_json_atomic

    job_path, out_path = argv
    with open(job_path) as handle:
        job = json.load(handle)
    # Before anything imports Triton; the interpreter only where there is no CUDA device,
    # unless the boot was asked to run on the CPU.
    if job["plan"]["device"] == "cpu":
        interpreter_for_cpu_run()
    else:
        default_to_interpreter()
    record = run_job(job, _emitter(job["parent_pid"]))
    write_json_atomic(out_path, record)
    print(f"{EVENT_PREFIX} {json.dumps({'event': 'done'})}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
