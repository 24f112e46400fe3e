"""The committed GPU evidence, small: one summary per GPU family, and whether the code moved.

`docs/evidence/<family>/` holds what one evidence run (`tools/gpu_evidence.sh`) established:
`summary.json` (the headline claims, read from the raw files by `evidence.headline`, and the
sha256 of every file those results depend on), `summary.md` (the README's Measured block for
it), `raw.tar.gz` (the raw results) and optionally `report.png`. Earlier runs live in git
history and `docs/evidence/HISTORY.md`.

The README's block says what the run measured and, computed from the tree it is rendered in,
which of those files changed since. A test checks that the block is honest; nothing requires
the evidence to be fresh, so code can land without a GPU run and the block then says it is
stale (`python -m det_suite.reports.evidence_summary` rewrites it).
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path, PurePosixPath

from det_suite.reports import evidence
from det_suite.reports.provenance import REPO_ROOT, source_hashes

EVIDENCE_ROOT = "docs/evidence"
SUMMARY = "summary.json"
SCHEMA = 1
RAW = "raw.tar.gz"
# Phases of an evidence run that the summary is read from and the raw archive keeps.
PHASES = ("matrix", "tests", "mutants")
# How many changed files the block names before it counts the rest.
NAMED_CHANGES = 12


def summarize(run_folder: str | Path, family: str, source_run: str) -> dict:
    """The summary of an unpacked evidence run (folders matrix/, tests/, mutants/)."""
    run_folder = Path(run_folder)
    recorded = evidence.recorded_hashes(run_folder)
    deps = evidence.dependencies(run_folder, recorded)
    return {"schema": SCHEMA, "family": family, "source_run": source_run,
            "command": "tools/gpu_evidence.sh",
            "headline": evidence.headline(run_folder),
            "dependencies": {p: recorded[p] for p in sorted(deps) if p in recorded}}


def pack(run_folder: str | Path, out: str | Path, family: str, source_run: str) -> dict:
    """Write a family folder from an unpacked run: summary.json, summary.md, raw.tar.gz."""
    from det_suite.reports.files import write_bytes_atomic, write_json_atomic, \
        write_text_atomic

    run_folder, out = Path(run_folder), Path(out)
    summary = summarize(run_folder, family, source_run)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in (*PHASES, "README.md", evidence.KNOWN_FAILURES):
            if (run_folder / name).exists():
                tar.add(run_folder / name, arcname=name)
    out.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out / RAW, buffer.getvalue())
    write_json_atomic(out / SUMMARY, summary)
    write_text_atomic(out / "summary.md", render_family(summary, {}, out_name(out)) + "\n")
    return summary


def out_name(folder: Path) -> str:
    try:
        return folder.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return folder.as_posix()


def unpack_raw(family_folder: str | Path, into: str | Path) -> Path:
    """Extract a family's raw results into `into` (for tests and reports); returns it."""
    into = Path(into)
    with tarfile.open(Path(family_folder) / RAW) as tar:
        tar.extractall(into, filter="data")
    return into


def families(root: str | Path | None = None) -> dict[str, dict]:
    """family -> summary, for every docs/evidence/<family>/summary.json under root."""
    base = Path(root if root is not None else REPO_ROOT) / EVIDENCE_ROOT
    found = {}
    for path in sorted(base.glob(f"*/{SUMMARY}")):
        summary = json.loads(path.read_text())
        if summary.get("schema") != SCHEMA:
            raise ValueError(f"{path}: schema {summary.get('schema')!r}, expected {SCHEMA}")
        found[path.parent.name] = summary
    return found


def changed_since(summary: dict, current: dict[str, str]) -> dict[str, str]:
    """Files the results depend on whose bytes are no longer in the tree (path -> why), and
    result modules added since. A file that only moved (same bytes, another path) is not a
    change: the code that ran is still there."""
    present = set(current.values())
    by_name: dict[str, list[str]] = {}
    for path in current:
        by_name.setdefault(PurePosixPath(path).name, []).append(path)
    changed = {}
    for path, digest in summary["dependencies"].items():
        if current.get(path) == digest or digest in present:
            continue
        if path in current:
            changed[path] = "changed since"
            continue
        # A test that moved and was edited: name where it went, not "deleted".
        moved = [p for p in by_name.get(PurePosixPath(path).name, []) if p not in summary["dependencies"]]
        changed[path] = f"moved to `{moved[0]}` and changed" if len(moved) == 1 else "deleted since"
    recorded_digests = set(summary["dependencies"].values())
    for path, digest in current.items():
        if (path.startswith(evidence.RESULT_DEPENDENCIES) and path not in summary["dependencies"]
                and digest not in recorded_digests):
            changed[path] = "added since"
    return dict(sorted(changed.items()))


def _changes_line(changed: dict[str, str]) -> str:
    if not changed:
        return "- Every file these results depend on is byte-identical in this tree."
    named = [f"`{p}` ({why})" for p, why in list(changed.items())[:NAMED_CHANGES]]
    rest = len(changed) - len(named)
    return (f"- **Changed since the run: {len(changed)} files** the results depend on, so the "
            "numbers describe the code at the commit above, not this tree, until the next GPU "
            "run: " + ", ".join(named) + (f", and {rest} more" if rest else "") + ".")


def render_family(summary: dict, changed: dict[str, str], folder: str) -> str:
    """One family's part of the Measured block."""
    block = evidence.render_markdown(summary["headline"], folder, summary["command"])
    return block + "\n" + _changes_line(changed)


def render_block(summaries: dict[str, dict], current: dict[str, str]) -> str:
    parts = [render_family(s, changed_since(s, current), f"{EVIDENCE_ROOT}/{family}")
             for family, s in summaries.items()]
    body = "\n\n".join(parts) if parts else "No GPU evidence is committed."
    return f"{evidence.BEGIN_MARK}\n{body}\n{evidence.END_MARK}"


def expected_block(root: str | Path | None = None) -> str:
    """What the README's block must say for the tree at root."""
    root = Path(root) if root is not None else REPO_ROOT
    return render_block(families(root), source_hashes(root))


def main(argv=None) -> int:
    """Rewrite README.md's Measured block for this tree (`pack RUN OUT FAMILY NAME` first
    turns a fresh run into a family folder)."""
    from det_suite.reports.files import write_text_atomic

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pack"]:
        if len(argv) != 5:
            print("usage: python -m det_suite.reports.evidence_summary pack RUN_DIR OUT_DIR "
                  "FAMILY RUN_NAME", file=sys.stderr)
            return 2
        pack(argv[1], argv[2], argv[3], argv[4])
    readme = REPO_ROOT / "README.md"
    text = readme.read_text()
    old = evidence.readme_block(text)
    if old is None:
        print(f"README.md has no block between {evidence.BEGIN_MARK!r} and "
              f"{evidence.END_MARK!r}", file=sys.stderr)
        return 2
    new = expected_block()
    write_text_atomic(readme, text.replace(old, new))
    print(f"README.md Measured block {'unchanged' if old == new else 'rewritten'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
