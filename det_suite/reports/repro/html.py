"""The reproducibility report as one self-contained HTML page: the plots beside each result
are embedded (base64 PNG), so the page can be opened, archived or screenshotted alone."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from det_suite.reports.repro.render import (NOT_GIVEN, STATUS_TEXT, environment_rows, overall,
                                            ran_counts, result_numbers)

HASH_CHARS = 16          # of a sha256 shown in the table; the whole digest is its tooltip
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;
max-width:1100px;color:#1b1f24;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;border-bottom:1px solid #d0d7de;
padding-bottom:4px;margin-top:28px}h3{font-size:15px;margin:0 0 6px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top;
overflow-wrap:anywhere}
td:first-child{overflow-wrap:normal}th{background:#f6f8fa}code{font-size:12px}
.status{display:inline-block;padding:0 6px;border-radius:10px;font-weight:600;
white-space:nowrap}
.pass{color:#116329;background:#dafbe1}.fail,.unreadable{color:#a40e26;background:#ffebe9}
.incomplete,.not-comparable{color:#7d4e00;background:#fff8c5}
.info{color:#57606a;background:#eaeef2}
.banner{padding:8px 12px;border-radius:6px;margin:8px 0}
.banner.ok{background:#dafbe1}.banner.bad{background:#ffebe9}
.result{border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;margin:12px 0}
.result p{margin:4px 0;color:#57606a}.result ul{margin:6px 0}
.meta{color:#57606a}
img{max-width:100%;border:1px solid #d0d7de;margin:6px 0}
"""


def _table(header, rows) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _status(status: str, text: str | None = None) -> str:
    label = text or STATUS_TEXT.get(status, status)
    return f'<span class="status {escape(status)}">{escape(label)}</span>'


def _link(link: str, text: str | None = None) -> str:
    return f'<a href="{escape(link)}">{escape(text or link)}</a>'


def _short(link: str) -> str:
    """The file and its folder: results of one check share a file name (run.json)."""
    return "/".join(link.split("/")[-2:])


def _image(path: str) -> str:
    try:
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    except OSError as exc:
        return f"<p>plot {escape(path)} not readable: {escape(str(exc))}</p>"
    return f'<img alt="{escape(Path(path).name)}" src="data:image/png;base64,{data}">'


def _head(payload: dict) -> list[str]:
    gen = payload["generated"]["environment"]
    return [f"<h1>{escape(payload['title'])}</h1>",
            f'<div class="banner {"ok" if payload["ok"] else "bad"}"><b>'
            f"{escape(overall(payload))}</b>. Built {escape(str(gen.get('timestamp_utc')))} "
            f"from det-suite at <code>{escape(str(gen.get('git_revision')))}</code>.</div>"]


def _overview(payload: dict) -> list[str]:
    results = _table(["#", "check", "status", "headline", "raw data"],
                     [[str(i), escape(e["title"]), _status(e["status"]),
                       escape(e["headline"][0] if e["headline"] else "-"),
                       _link(e["link"], _short(e["link"]))]
                      for i, e in enumerate(payload["results"], 1)])
    ran = _table(["check", "in this report"],
                 [[escape(c["title"]),
                   ("ran: " + ", ".join(_status(s, text) for s, text
                                        in ran_counts(c["statuses"])))
                   if c["present"] else escape(NOT_GIVEN)]
                  for c in payload["checks"]])
    skipped = [f"<li>{escape(e['title'])}: {escape(s)}</li>"
               for e in payload["results"] for s in e["skipped"]]
    return ["<h2>Results</h2>", results, "<h2>What ran</h2>", ran,
            "<h2>Skipped or not run, and why</h2><ul>",
            "".join(skipped) or "<li>nothing the results report as skipped</li>", "</ul>"]


def _sections(payload: dict) -> list[str]:
    parts = ["<h2>Each result</h2>"]
    for i, e in enumerate(payload["results"], 1):
        meta = (f"Raw data: {_link(e['link'])}; machine {escape(str(e['machine'] or '?'))}, "
                f"revision <code>{escape(str(e['revision'] or '?'))}</code>"
                + (f", {escape(e['timestamp'])}" if e.get("timestamp") else "") + ".")
        ran = f"<p>Ran: {escape(e['ran'])}.</p>" if e["ran"] else ""
        parts.append(f'<section class="result"><h3>{i}. {escape(e["title"])} '
                     f'{_status(e["status"])}</h3><p>{meta}</p>{ran}<ul>'
                     + "".join(f"<li>{escape(line)}</li>" for line in e["headline"])
                     + "</ul>" + "".join(_image(p["path"]) for p in e["plots"])
                     + "</section>")
    return parts


def _provenance(payload: dict) -> list[str]:
    parts = ["<h2>Provenance</h2>",
             _table(["git revision", "results"],
                    [[f"<code>{escape(rev)}</code>", result_numbers(idx)]
                     for rev, idx in payload["revisions"].items()])]
    k = payload["kernel_hashes"]
    if not k["recorded_by"]:
        parts.append("<p>No result recorded the sha256 of det-suite's sources.</p>")
        return parts
    verdict = ("the same in every result that recorded them" if k["consistent"]
               else "NOT the same across results: " + ", ".join(k["differ"]))
    changed = ("; unchanged in the tree this report was built from" if not k["changed_since"]
               else "; changed since in this tree: " + ", ".join(k["changed_since"]))
    parts.append(f"<p>Kernel sources and tile tables: <b>{escape(verdict)}</b>"
                 f"{escape(changed)}.</p>")
    parts.append(_table(["file", f"sha256, first {HASH_CHARS} hex (results)", "unchanged here"], [
        [f"<code>{escape(r['path'])}</code>",
         "<br>".join(f'<code title="{escape(h)}">{escape(h[:HASH_CHARS])}</code> '
                     f"({result_numbers(idx, k['recorded_by'])})"
                     for h, idx in r["hashes"].items()) or "not recorded",
         "-" if r["unchanged"] is None else ("yes" if r["unchanged"] else "<b>NO</b>")]
        for r in k["rows"]]))
    return parts


def render_html(payload: dict) -> str:
    header, rows = environment_rows(payload)
    parts = [*_head(payload), *_overview(payload), *_sections(payload),
             "<h2>Environment</h2>",
             _table(header, [[escape(cell) for cell in row] for row in rows]),
             *_provenance(payload)]
    if payload["notes"]:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>"
                                                    for n in payload["notes"]) + "</ul>")
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(payload['title'])}</title><style>{STYLE}</style></head>"
            "<body>\n" + "\n".join(parts) + "\n</body></html>\n")
