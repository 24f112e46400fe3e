"""Model specs: the one string a user passes as `--model`, resolved to a Qwen3Checkpoint.

- a local folder: a ModelOpt FP8 checkpoint (`models.loader`);
- `synthetic:<preset>?seed=S`: built in memory straight onto the device, no files written;
- a hub id `owner/name`: through huggingface_hub, from the local cache when offline
  (HF_HUB_OFFLINE=1, or no network but a warm cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from det_suite.errors import InputError

SYNTHETIC = "synthetic:"
HUB_FILES = ["*.json", "*.safetensors", "tokenizer*", "*.jinja"]
EXPECTED = "a checkpoint folder, a hub id (owner/name) or 'synthetic:<preset>?seed=S'"


class ModelSpecError(InputError):
    """A --model value that names no model; the message says what the forms are."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed --model value. kind: "synthetic" (preset, seed), "path" (an existing local
    folder or file: path) or "hub" (owner/name: hub_id). `text` is what the user wrote."""

    text: str
    kind: str
    preset: str | None = None
    seed: int = 0
    path: Path | None = None
    hub_id: str | None = None

    @classmethod
    def parse(cls, text) -> "ModelSpec":
        if isinstance(text, ModelSpec):
            return text
        if not isinstance(text, str) or not text:
            raise ModelSpecError(f"model spec: expected {EXPECTED}, got {text!r}")
        if text.startswith(SYNTHETIC):
            preset, seed = _parse_synthetic(text)
            return cls(text, "synthetic", preset=preset, seed=seed)
        path = Path(text).expanduser()
        if path.exists():
            return cls(text, "path", path=path)
        if _looks_like_hub_id(text):
            return cls(text, "hub", hub_id=text)
        raise ModelSpecError(f"model spec {text!r}: no such folder, and not a hub id "
                             "(owner/name) or 'synthetic:<preset>?seed=S'")

    @property
    def synthetic(self) -> bool:
        return self.kind == "synthetic"

    def __str__(self) -> str:
        return self.text


def _parse_synthetic(spec: str) -> tuple[str, int]:
    from det_suite.models.synthetic import PRESETS

    parts = urlsplit(spec[len(SYNTHETIC):])
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"seed"})
    if parts.path not in PRESETS or unknown or len(query.get("seed", ["0"])) != 1:
        raise ModelSpecError(f"model spec {spec!r}: expected 'synthetic:<preset>?seed=S' with "
                             f"preset one of {', '.join(PRESETS)} and S a non-negative integer")
    seed_text = query.get("seed", ["0"])[0]
    if not seed_text.isdigit():
        raise ModelSpecError(f"model spec {spec!r}: seed must be a non-negative integer, "
                             f"got {seed_text!r}")
    return parts.path, int(seed_text)


def is_synthetic(spec) -> bool:
    """Whether a spec string (or a checkpoint's `source`) names a synthetic model, without
    validating it."""
    return isinstance(spec, ModelSpec) and spec.synthetic or str(spec).startswith(SYNTHETIC)


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
            raise ModelSpecError(f"model spec {repo_id!r}: not a local folder, and the hub id "
                             f"could not be fetched or found in the local cache "
                             f"({type(online_error).__name__}: {online_error})") from None


def load_model(spec, *, device="cpu"):
    """A Qwen3Checkpoint on `device` for a local path, a hub id or a synthetic spec."""
    from det_suite.models.loader import load_checkpoint

    spec = ModelSpec.parse(spec)
    if spec.kind == "synthetic":
        from det_suite.models.synthetic import build_synthetic

        return build_synthetic(spec.preset, spec.seed, device=device)
    if spec.kind == "path":
        return load_checkpoint(spec.path, device=device)
    ckpt = load_checkpoint(hub_snapshot(spec.hub_id), device=device)
    ckpt.source = spec.text
    return ckpt
