"""The report's HTML page in a headless browser: a real screenshot where a browser is on
this machine, and a clear error naming what to install where none is."""

import base64
import io
import struct
import sys

import pytest

from det_suite.reports.repro import screenshot as shot


def _png(width, height):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width / 100, height / 100), dpi=100)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _html(tmp_path, png=None, rows=3):
    image = (f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}">'
             if png else "")
    path = tmp_path / "page.html"
    path.write_text("<html><body><h1>t</h1><table>" + "<tr><td>x</td></tr>" * rows
                    + "</table>" + image + "</body></html>")
    return path


@pytest.mark.parametrize("png_size, rows, expected", [
    (None, 3, 200 + 30 * 4),
    ((2200, 1000), 3, 200 + 30 * 4 + 500 + 20),
    ((550, 400), 0, 200 + 30 * 1 + 400 + 20),
], ids=["text-only", "wide-plot-scaled-to-page", "narrow-plot-as-is"])
def test_page_height_counts_rows_and_plots(tmp_path, png_size, rows, expected):
    png = _png(*png_size) if png_size else None
    assert shot.page_height(_html(tmp_path, png, rows).read_text()) == expected


def test_without_any_browser_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(shot.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "playwright", None)
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)
    with pytest.raises(shot.ScreenshotUnavailable, match="pip install playwright.*chromium"):
        shot.screenshot(_html(tmp_path), tmp_path / "page.png")
    assert not (tmp_path / "page.png").exists()


@pytest.mark.skipif(shot.browser_binary() is None, reason="no chromium/chrome on PATH")
def test_a_browser_on_path_takes_the_whole_page(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "playwright", None)       # the command-line route
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)
    html = _html(tmp_path, _png(800, 600), rows=10)
    png, tool = shot.screenshot(html, tmp_path / "page.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and tool == shot.browser_binary()
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (shot.WIDTH, shot.page_height(html.read_text()))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
