"""Writing results: atomically, so a reader or a crash never leaves a partial file."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

# What open(path, "w") asks for; the process umask takes its share (0644 under umask 022).
# tempfile.mkstemp would make every report 0600, unreadable to the rest of a CI group.
_NEW_FILE_MODE = 0o666


def _create_temporary(folder: Path, name: str) -> tuple[int, str]:
    for _attempt in range(100):
        tmp = folder / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _NEW_FILE_MODE), str(tmp)
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file for {name} in {folder}")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write via a temporary file in the same folder and rename, so readers never see a
    partial report and a crash leaves the previous file (or none) behind. The file gets
    the permissions a plain open() would give it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, payload) -> Path:
    return write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
