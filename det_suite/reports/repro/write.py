"""Writing the reproducibility report: repro.json, repro.md (pull request), repro_summary.md
($GITHUB_STEP_SUMMARY) and repro.html, each atomically; and adding the summary to a CI
job's step summary file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from det_suite.reports.files import write_json_atomic, write_text_atomic
from det_suite.reports.repro.html import render_html
from det_suite.reports.repro.render import render_markdown, render_step_summary

JSON_NAME, MARKDOWN_NAME = "repro.json", "repro.md"
SUMMARY_NAME, HTML_NAME, PNG_NAME = "repro_summary.md", "repro.html", "repro.png"
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def write_report(payload: dict, out) -> dict[str, str]:
    out = Path(out)
    return {"json": str(write_json_atomic(out / JSON_NAME, payload)),
            "markdown": str(write_text_atomic(out / MARKDOWN_NAME, render_markdown(payload))),
            "summary": str(write_text_atomic(out / SUMMARY_NAME, render_step_summary(payload))),
            "html": str(write_text_atomic(out / HTML_NAME, render_html(payload)))}


def step_summary_path(asked: str | None) -> Path | None:
    """The file the step summary goes to: None when not asked for; `asked` when it names a
    file; "" means $GITHUB_STEP_SUMMARY (ValueError when that is not set)."""
    if asked is None:
        return None
    value = asked or os.environ.get(STEP_SUMMARY_ENV)
    if not value:
        raise ValueError(f"step_summary: no file given and ${STEP_SUMMARY_ENV} is not set")
    return Path(value)


def add_to_step_summary(path: Path, payload: dict) -> Path:
    """Append the summary to `path` (GitHub's step summary file collects every step's
    text); the file is replaced whole, so a reader never sees half of it."""
    before = path.read_text(encoding="utf-8") if path.exists() else ""
    separator = "\n" if before and not before.endswith("\n") else ""
    return write_text_atomic(path, before + separator + render_step_summary(payload) + "\n")


@dataclass
class ReportResult:
    payload: dict
    paths: dict[str, str]
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every result passed (or only ran), 1 when any failed or is incomplete, 3
        when a run folder mixes results of two runs (not comparable)."""
        if not self.payload.get("comparable", True):
            return 3
        return 0 if self.payload["ok"] else 1


def make_report(settings) -> ReportResult:
    """Build the report from settings.inputs, write it into settings.out, add it to the step
    summary and take the screenshot when asked. Raises ReportInputError for bad inputs and
    ScreenshotUnavailable when a screenshot was asked for and no browser can take it."""
    from det_suite.reports.repro.build import build_report

    payload = build_report(settings)
    paths = write_report(payload, settings.out)
    notes = []
    summary = step_summary_path(settings.step_summary)
    if summary is not None:
        paths["step_summary"] = str(add_to_step_summary(summary, payload))
    if settings.screenshot:
        from det_suite.reports.repro.screenshot import screenshot

        png, tool = screenshot(paths["html"], Path(settings.out) / PNG_NAME)
        paths["screenshot"] = str(png)
        notes.append(f"screenshot taken with {tool}")
    return ReportResult(payload, paths, notes)
