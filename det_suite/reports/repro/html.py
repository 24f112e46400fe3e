"""The reproducibility report as one self-contained HTML page: the plots beside each result
are embedded (base64 PNG), so the page can be opened, archived or screenshotted alone."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from det_suite.reports.repro.render import STATUS_TEXT, environment_rows, overall

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;
max-width:1100px;color:#1b1f24;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #d0d7de;padding-bottom:4px;
margin-top:28px}h3{font-size:15px;margin-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}code{font-size:12px}
.pass{color:#116329;font-weight:600}.fail,.unreadable{color:#cf222e;font-weight:600}
.incomplete{color:#9a6700;font-weight:600}.info{color:#57606a}
.banner{padding:8px 12px;border-radius:6px;margin:8px 0}
.banner.ok{background:#dafbe1}.banner.bad{background:#ffebe9}
img{max-width:100%;border:1px solid #d0d7de;margin:6px 0}
"""


def _table(header, rows) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _status(status: str) -> str:
    return f'<span class="{escape(status)}">{escape(STATUS_TEXT.get(status, status))}</span>'


def _link(link: str, text: str | None = None) -> str:
    return f'<a href="{escape(link)}">{escape(text or link)}</a>'


def _image(path: str) -> str:
    try:
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    except OSError as exc:
        return f"<p>plot {escape(path)} not readable: {escape(str(exc))}</p>"
    return f'<img alt="{escape(Path(path).name)}" src="data:image/png;base64,{data}">'


def render_html(payload: dict) -> str:
    gen = payload["generated"]["environment"]
    parts = [f"<h1>{escape(payload['title'])}</h1>",
             f'<div class="banner {"ok" if payload["ok"] else "bad"}"><b>'
             f"{escape(overall(payload))}</b>. Built {escape(str(gen.get('timestamp_utc')))} "
             f"from det-suite at <code>{escape(str(gen.get('git_revision')))}</code>.</div>",
             "<h2>Results</h2>",
             _table(["#", "check", "status", "headline", "raw data"],
                    [[str(i), escape(e["title"]), _status(e["status"]),
                      escape(e["headline"][0] if e["headline"] else "-"),
                      _link(e["link"], e["link"].rsplit("/", 1)[-1])]
                     for i, e in enumerate(payload["results"], 1)]),
             "<h2>What ran</h2>",
             _table(["check", "in this report"],
                    [[escape(c["title"]),
                      ("ran: " + ", ".join(_status(s) for s in c["statuses"])) if c["present"]
                      else "not in this report (no result given)"]
                     for c in payload["checks"]]),
             "<h2>Skipped or not run, and why</h2><ul>"]
    skipped = [f"<li>{escape(e['title'])}: {escape(s)}</li>"
               for e in payload["results"] for s in e["skipped"]]
    parts.append("".join(skipped) or "<li>nothing the results report as skipped</li>")
    parts.append("</ul>")
    for i, e in enumerate(payload["results"], 1):
        parts.append(f"<h3>{i}. {escape(e['title'])}: {_status(e['status'])}</h3>")
        parts.append(f"<p>Raw data: {_link(e['link'])}; machine "
                     f"{escape(str(e['machine'] or '?'))}, revision "
                     f"<code>{escape(str(e['revision'] or '?'))}</code>."
                     + (f" Ran: {escape(e['ran'])}." if e["ran"] else "") + "</p>")
        parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in e["headline"])
                     + "</ul>")
        parts += [_image(p["path"]) for p in e["plots"]]
    header, rows = environment_rows(payload)
    parts.append("<h2>Environment</h2>")
    parts.append(_table(header, [[escape(cell) for cell in row] for row in rows]))
    k = payload["kernel_hashes"]
    parts.append("<h2>Provenance</h2><p>Git revisions: " + "; ".join(
        f"<code>{escape(rev)}</code> (results {', '.join(str(i + 1) for i in idx)})"
        for rev, idx in payload["revisions"].items()) + ".</p>")
    if k["recorded_by"]:
        verdict = ("the same in every result that recorded them" if k["consistent"]
                   else "NOT the same across results: " + ", ".join(k["differ"]))
        parts.append(f"<p>Kernel sources and tile tables: {escape(verdict)}.</p>")
        parts.append(_table(["file", "sha256 (results)", "unchanged here"], [
            [f"<code>{escape(r['path'])}</code>",
             "<br>".join(f"<code>{escape(h)}</code> ({', '.join(str(i + 1) for i in idx)})"
                         for h, idx in r["hashes"].items()) or "not recorded",
             "-" if r["unchanged"] is None else ("yes" if r["unchanged"] else "NO")]
            for r in k["rows"]]))
    if payload["notes"]:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>"
                                                    for n in payload["notes"]) + "</ul>")
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(payload['title'])}</title><style>{STYLE}</style></head>"
            "<body>\n" + "\n".join(parts) + "\n</body></html>\n")
