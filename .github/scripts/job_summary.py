"""Write a results folder into the GitHub job summary ($GITHUB_STEP_SUMMARY).

    python job_summary.py TITLE DIR

One table row per JUnit file under DIR (passed, failed, errors, skipped = not run), then
every Markdown report under DIR as written. Prints to stdout without GITHUB_STEP_SUMMARY.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def junit_row(path: Path, root: Path) -> str:
    suites = ET.parse(path).getroot()
    suites = [suites] if suites.tag == "testsuite" else list(suites.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites)
             for k in ("tests", "failures", "errors", "skipped")}
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return (f"| `{path.relative_to(root)}` | {passed} | {total['failures']} | "
            f"{total['errors']} | {total['skipped']} |")


def summary(title: str, root: Path) -> str:
    lines = [f"## {title}", ""]
    junits = sorted(root.rglob("*.xml"))
    if junits:
        lines += ["| JUnit | passed | failed | errors | not run |", "| --- | --- | --- | --- | --- |"]
        lines += [junit_row(p, root) for p in junits]
    else:
        lines.append(f"No JUnit report under `{root}`: the tests did not run.")
    for md in sorted(root.rglob("*.md")):
        lines += ["", f"### {md.relative_to(root)}", "", md.read_text()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: job_summary.py TITLE DIR", file=sys.stderr)
        return 2
    text = summary(argv[0], Path(argv[1]))
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
