"""A run folder that is replaced whole: a command writes into a hidden folder beside its
--out and swaps it in at the end, so a folder never holds two runs' results side by side
(an interrupted run leaves the previous results untouched, and no partial ones).

Every JSON result written gets the run's `run_id`, and the folder a hidden manifest
(MANIFEST) naming it: `det-suite report` refuses a run folder whose results disagree with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import time
from pathlib import Path

from det_suite.reports.files import write_json_atomic

MANIFEST = ".det-suite-run.json"


def new_run_id() -> str:
    """UTC start time plus a random tail: sortable, and unique across machines."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def stamp(folder: Path, run_id: str) -> list[str]:
    """Add run_id to every JSON object result under `folder`; write the manifest. Returns
    the stamped files, relative to the folder."""
    stamped = []
    for path in sorted(folder.rglob("*.json")):
        if path.name.startswith("."):
            continue
        payload = json.loads(path.read_text())
        if isinstance(payload, dict):
            write_json_atomic(path, {"run_id": run_id, **payload})
            stamped.append(path.relative_to(folder).as_posix())
    write_json_atomic(folder / MANIFEST, {"run_id": run_id, "results": stamped})
    return stamped


def _replace(source: Path, target: Path, run_id: str) -> None:
    """Put `source` where `target` is: between the two renames `target` is briefly absent,
    never a mix; the old one is deleted once the new one is in place."""
    old = target.with_name(f".{target.name}.replaced-{run_id}")
    if target.exists():
        os.rename(target, old)
    os.rename(source, target)
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    elif old.exists():
        old.unlink()


def _swap(staging: Path, out: Path, run_id: str) -> None:
    """`out` replaced whole when it is a run folder (holds MANIFEST), empty or absent. A
    folder det-suite did not make (say --out results) keeps what the run does not write:
    only the entries the run wrote are replaced, each whole."""
    if not out.exists() or (out / MANIFEST).exists() or not any(out.iterdir()):
        _replace(staging, out, run_id)
        return
    for entry in sorted(staging.iterdir()):
        _replace(entry, out / entry.name, run_id)


@contextlib.contextmanager
def staged_run(out, run_id: str | None = None):
    """Yields (staging folder, run_id). On a normal exit the staging folder is stamped and
    replaces `out`; on any exception, Ctrl-C included, it is removed and `out` is left as it
    was."""
    out = Path(out)
    run_id = run_id or new_run_id()
    created = [p for p in [out.parent, *out.parent.parents] if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.partial-{run_id}")
    staging.mkdir()
    finished = False
    try:
        yield staging, run_id
        stamp(staging, run_id)
        _swap(staging, out, run_id)
        finished = True
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        for folder in created if not finished else ():   # leave no empty results/ behind
            with contextlib.suppress(OSError):
                folder.rmdir()


def manifest_for(path: Path, root: Path) -> tuple[Path, dict] | None:
    """The run folder manifest that covers result `path` (searching up to `root`), if any."""
    for folder in [path.parent, *path.parent.parents]:
        manifest = folder / MANIFEST
        if manifest.is_file():
            try:
                return folder, json.loads(manifest.read_text())
            except ValueError:
                return folder, {}
        if folder == root or folder == folder.parent:
            break
    return None
