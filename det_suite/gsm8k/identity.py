"""What a fixture is keyed by: the model, the platform a run computes on, the runtime stack,
and (recorded beside the key) the kernel policy.

Two runs are comparable when their model, backend, mode, platform and stack are the same:
only then must their outputs be bit-identical. The kernel policy is not part of that test:
a fixture exists to show that outputs survive a change of kernels or tile tables that keeps
the reduction schedule, so a policy change is reported next to the verdict, not instead of
it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from det_suite.models.spec import ModelSpec, ModelSpecError, hub_snapshot
from det_suite.reports.provenance import tree_sha256

_CHUNK = 8 << 20


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_ids(ids) -> str:
    """sha256 of token ids written as decimal numbers joined by commas ("1,22,333"): the
    same digest in any language, for any id width."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode("ascii")).hexdigest()


def folder_sha256(root, *, progress: bool = False) -> str:
    """sha256 over every file under `root`: its relative path, then its bytes' sha256, in
    path order. A model folder copied anywhere keeps its digest."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".cache" not in p.parts)
    total = sum(p.stat().st_size for p in files)
    bar = None
    if progress:
        from det_suite.platform.progress import progress_bar
        bar = progress_bar(total=total, unit="B", unit_scale=True, desc=f"hashing {root.name}",
                           leave=False)
    digest = hashlib.sha256()
    try:
        for path in files:
            one = hashlib.sha256()
            with open(path, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    one.update(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
            digest.update(f"{path.relative_to(root).as_posix()}\0{one.hexdigest()}\n".encode())
    finally:
        if bar is not None:
            bar.close()
    return digest.hexdigest()


def model_identity(spec, *, progress: bool = False) -> dict:
    """The model a spec names, independent of where it lies: a synthetic preset and seed, or
    the content digest of a checkpoint folder (plus the hub revision for a hub id)."""
    spec = ModelSpec.parse(spec)
    if spec.kind == "synthetic":
        return {"kind": "synthetic", "preset": spec.preset, "seed": spec.seed}
    if spec.kind == "path":
        if not spec.path.is_dir():
            raise ModelSpecError(f"model spec {spec.text!r}: a file, not a checkpoint folder")
        return {"kind": "path", "name": spec.path.resolve().name,
                "content_sha256": folder_sha256(spec.path, progress=progress)}
    snapshot = hub_snapshot(spec.hub_id)
    return {"kind": "hub", "id": spec.hub_id, "revision": snapshot.name,
            "content_sha256": folder_sha256(snapshot, progress=progress)}


def model_label(identity: dict) -> str:
    if identity["kind"] == "synthetic":
        return f"synthetic:{identity['preset']}?seed={identity['seed']}"
    name = identity.get("id") or identity.get("name")
    return f"{name} (content {identity['content_sha256'][:12]})"


def model_slug(identity: dict) -> str:
    """A folder name for the model's fixtures."""
    if identity["kind"] == "synthetic":
        return f"synthetic-{identity['preset']}-seed{identity['seed']}"
    name = (identity.get("id") or identity["name"]).replace("/", "--")
    return f"{name}-{identity['content_sha256'][:12]}"


def same_model(a: dict, b: dict) -> bool:
    if a.get("kind") == "synthetic" or b.get("kind") == "synthetic":
        return (a.get("kind"), a.get("preset"), a.get("seed")) == \
               (b.get("kind"), b.get("preset"), b.get("seed"))
    return bool(a.get("content_sha256")) and a.get("content_sha256") == b.get("content_sha256")


def platform_key(device) -> dict:
    """Where the arithmetic happens: a CUDA GPU's family (and its name), or the CPU under
    the Triton interpreter; and the tile table the kernels use there."""
    import torch

    from det_suite.platform.family import device_family
    from det_suite.platform.interpreter import interpreter_active

    dev = torch.device(device)
    key = {"device": dev.type, "interpreter": interpreter_active(),
           "tile_family": device_family(dev)}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        from det_suite.platform.family import family_of_capability
        key.update(gpu_family=family_of_capability(props.major, props.minor), gpu=props.name,
                   capability=f"{props.major}.{props.minor}")
    else:
        key.update(gpu_family=None, gpu=None, capability=None)
    return key


def stack_key(*, interpreter: bool) -> dict:
    """Runtime versions the bits depend on (numpy too where it does the interpreter's math)."""
    import torch
    import triton

    stack = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
             "triton": triton.__version__}
    if interpreter:
        import numpy
        stack["numpy"] = numpy.__version__
    return stack


def policy_info(tile_family: str) -> dict:
    """The kernel policy: sha256 of the family's tile table, of the kernel sources
    (det_suite/kernels) and of the launch code (det_suite/ops), and one digest of all three."""
    import det_suite

    package = Path(det_suite.__file__).resolve().parent
    table = package / "policy" / "tables" / f"{tile_family}.json"

    def tree(folder: str) -> str:
        return tree_sha256({path.name: hashlib.sha256(path.read_bytes()).hexdigest()
                            for path in (package / folder).glob("*.py")})

    parts = {"table_sha256": hashlib.sha256(table.read_bytes()).hexdigest()
             if table.is_file() else None,
             "kernels_sha256": tree("kernels"), "ops_sha256": tree("ops")}
    combined = hashlib.sha256("".join(f"{k}={v}\n" for k, v in parts.items()).encode())
    return {"tile_family": tile_family, "sha256": combined.hexdigest(), **parts}


def comparability(recorded: dict, current: dict) -> list[str]:
    """Why a run keyed `current` cannot be held to a fixture keyed `recorded` (empty: it
    can). Keys are {"model", "backend", "mode", "platform", "stack"}."""
    reasons = []
    if not same_model(recorded["model"], current["model"]):
        reasons.append(f"model: recorded {model_label(recorded['model'])}, this run "
                       f"{model_label(current['model'])}")
    for field in ("backend", "mode"):
        if recorded[field] != current[field]:
            reasons.append(f"{field}: recorded {recorded[field]}, this run {current[field]}")
    for group in ("platform", "stack"):
        for name in sorted(set(recorded[group]) | set(current[group])):
            if name in ("gpu",):      # the product name: the family and capability decide
                continue
            was, now = recorded[group].get(name), current[group].get(name)
            if was != now:
                reasons.append(f"{group} {name}: recorded {was}, this run {now}")
    return reasons
