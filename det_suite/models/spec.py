"""Model specs: the one string a user passes as `--model`, resolved to a Qwen3Checkpoint.

- a local folder: a ModelOpt FP8 checkpoint (`models.loader`);
- `synthetic:<preset>?seed=S`: built in memory straight onto the device, no files written;
- a hub id `owner/name`: through huggingface_hub, from the local cache when offline
  (HF_HUB_OFFLINE=1, or no network but a warm cache).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

SYNTHETIC = "synthetic:"
HUB_FILES = ["*.json", "*.safetensors", "tokenizer*", "*.jinja"]


def parse_synthetic(spec: str) -> tuple[str, int]:
    """'synthetic:<preset>?seed=S' -> (preset, seed); seed defaults to 0."""
    from det_suite.models.synthetic import PRESETS

    parts = urlsplit(spec[len(SYNTHETIC):])
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"seed"})
    if parts.path not in PRESETS or unknown or len(query.get("seed", ["0"])) != 1:
        raise ValueError(f"model spec {spec!r}: expected 'synthetic:<preset>?seed=S' with "
                         f"preset one of {', '.join(PRESETS)} and S a non-negative integer")
    seed_text = query.get("seed", ["0"])[0]
    if not seed_text.isdigit():
        raise ValueError(f"model spec {spec!r}: seed must be a non-negative integer, "
                         f"got {seed_text!r}")
    return parts.path, int(seed_text)


def _looks_like_hub_id(spec: str) -> bool:
    owner, _, name = spec.partition("/")
    return bool(owner) and bool(name) and "/" not in name and not spec.startswith((".", "~"))


def hub_snapshot(repo_id: str) -> Path:
    """The checkpoint folder for a hub id: downloaded, or from the cache when offline."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES))
    except Exception as online_error:  # no network, or the hub refused: try the cache
        try:
            return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES,
                                          local_files_only=True))
        except Exception:
            raise ValueError(f"model spec {repo_id!r}: not a local folder, and the hub id "
                             f"could not be fetched or found in the local cache "
                             f"({type(online_error).__name__}: {online_error})") from None


def load_model(spec: str, *, device="cpu"):
    """A Qwen3Checkpoint on `device` for a local path, a hub id or a synthetic spec."""
    from det_suite.models.loader import load_checkpoint

    if not isinstance(spec, str) or not spec:
        raise ValueError(f"model spec: expected a path, a hub id or 'synthetic:<preset>?seed=S',"
                         f" got {spec!r}")
    if spec.startswith(SYNTHETIC):
        from det_suite.models.synthetic import build_synthetic

        preset, seed = parse_synthetic(spec)
        return build_synthetic(preset, seed, device=device)
    path = Path(spec).expanduser()
    if path.exists():
        return load_checkpoint(path, device=device)
    if _looks_like_hub_id(spec):
        ckpt = load_checkpoint(hub_snapshot(spec), device=device)
        ckpt.source = spec
        return ckpt
    raise ValueError(f"model spec {spec!r}: no such folder, and not a hub id (owner/name) or "
                     "'synthetic:<preset>?seed=S'")
