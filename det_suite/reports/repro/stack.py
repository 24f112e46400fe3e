"""The machine and software stack a result recorded, as the report's environment rows.

Gathering lives in `reports.environment` (`environment()`, with `package_versions()` and
`gpu_details()`): every result records it there, and the report reads it back here. A
result's environment wins over the copies some checks keep beside it (e2e keeps `gpu` and
`packages` at the top level too). A field the result did not record is None, shown as "not
recorded", never filled from the machine the report is built on.
"""

from __future__ import annotations

ENV_FIELDS = ("GPU", "capability", "driver", "power limit", "CUDA (torch)", "CUDA driver",
              "torch", "triton", "transformers", "sglang", "flashinfer", "python",
              "det-suite")
# Fields only a GPU run has: a result that says it ran without one gets NO_GPU where it has
# no value, not "not recorded" (torch's CUDA is None in a CPU build).
GPU_ONLY = ("capability", "driver", "power limit", "CUDA (torch)", "CUDA driver")
NO_GPU = "n/a (no GPU)"


def recorded_packages(data: dict) -> dict:
    env = data.get("environment") or {}
    return {**(data.get("packages") or {}), **(env.get("packages") or {})}


def recorded_gpu(data: dict) -> dict:
    env = data.get("environment") or {}
    return {**(data.get("gpu") or {}), **(env.get("gpu") or {})}


def _watts(value):
    return f"{value:g} W" if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value


def environment_row(data: dict) -> dict:
    """ENV_FIELDS -> value for one result (or {"environment": environment()}); None: the
    result did not record it."""
    env, gpu, pkgs = data.get("environment") or {}, recorded_gpu(data), recorded_packages(data)
    row = {
        "GPU": gpu.get("name") or env.get("machine"),
        "capability": gpu.get("capability"),
        "driver": gpu.get("driver"),
        "power limit": _watts(gpu.get("power_limit_w")),
        "CUDA (torch)": env.get("torch_cuda") or gpu.get("torch_cuda"),
        "CUDA driver": gpu.get("cuda_driver"),
        "torch": env.get("torch") or pkgs.get("torch"),
        "triton": env.get("triton") or pkgs.get("triton"),
        "transformers": pkgs.get("transformers"),
        "sglang": pkgs.get("sglang"),
        "flashinfer": pkgs.get("flashinfer"),
        "python": env.get("python") or pkgs.get("python"),
        "det-suite": env.get("det_suite"),
    }
    if gpu.get("available") is False:
        row.update({name: row[name] or NO_GPU for name in GPU_ONLY})
    return row


def not_installed(data: dict) -> set[str]:
    """ENV_FIELDS packages the result lists as absent (None in its package versions): "not
    installed", which a reader must not confuse with "not recorded"."""
    pkgs = recorded_packages(data)
    return {name for name in ("transformers", "sglang", "flashinfer")
            if name in pkgs and pkgs[name] is None}
