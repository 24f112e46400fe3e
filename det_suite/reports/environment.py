"""What produced a result: machine, GPU, software stack and det-suite's own source, captured
once per report by every command."""

from __future__ import annotations

import datetime as _dt
import platform


def git_revision() -> str | None:
    """The revision a result names: DET_SUITE_REVISION when the sender set it, else
    '<commit>' for a clean tree or '<commit>+diff.<hash>' (det_suite.reports.provenance)."""
    from det_suite.reports.provenance import revision

    return revision()["revision"]


def environment() -> dict:
    """What produced a result: machine, GPU, software stack, det-suite source."""
    import torch
    import triton

    from det_suite import __version__
    from det_suite.platform.family import device_family, family_source
    from det_suite.platform.interpreter import interpreter_active
    from det_suite.reports.provenance import revision, source_hashes, tree_sha256

    hashes = source_hashes()
    rev = revision()  # runs git a few times: once per report, not per field
    env = {
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton.__version__,
        "det_suite": __version__,
        "git_revision": rev["revision"],
        "revision": rev,
        "triton_interpret": interpreter_active(),
        "cuda_available": torch.cuda.is_available(),
        # No GPU and no interpreter: no kernel can run, so no tile table is in play.
        "tile_family": (device_family() if torch.cuda.is_available() or interpreter_active()
                        else None),
        "tile_family_source": family_source(),
        "source_sha256": hashes,
        "source_tree_sha256": tree_sha256(hashes),
    }
    if torch.cuda.is_available() and not interpreter_active():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
        }
        env["machine"] = props.name
    else:
        env["machine"] = (f"CPU ({platform.processor() or platform.machine()})"
                          + (", Triton interpreter" if interpreter_active() else ", no GPU"))
    return env
