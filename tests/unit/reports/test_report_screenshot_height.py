"""The screenshot holds the whole page even where rows wrap (the browser lays the page out
once to measure it; the row-count estimate alone cut real reports short), and measuring
leaves no file behind whether the browser answers or not."""

import io
import sys

import pytest

from det_suite.reports.repro import screenshot as shot

needs_browser = pytest.mark.skipif(shot.browser_binary() is None,
                                   reason="no chromium/chrome on PATH")
END_MARK = "#d4145a"


def _tall_page(tmp_path):
    """One paragraph that wraps into hundreds of lines (the estimate counts it as one row),
    ending in a coloured block."""
    words = " ".join(f"word{i}" for i in range(6000))
    path = tmp_path / "page.html"
    path.write_text(f"<html><body style='margin:8px'><p>{words}</p>"
                    f"<div style='height:40px;background:{END_MARK}'></div></body></html>")
    return path


def _dotfiles(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


@needs_browser
def test_the_browser_measures_a_page_taller_than_the_estimate(tmp_path):
    html = _tall_page(tmp_path)
    height = shot.measured_height(shot.browser_binary(), html, timeout_s=120)
    assert height is not None and height > 4 * shot.page_height(html.read_text())
    assert _dotfiles(tmp_path) == []


@needs_browser
def test_the_screenshot_reaches_the_end_of_a_wrapped_page(tmp_path, monkeypatch):
    image = pytest.importorskip("PIL.Image")
    monkeypatch.setitem(sys.modules, "playwright", None)       # the command-line route
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)
    html = _tall_page(tmp_path)
    png, _ = shot.screenshot(html, tmp_path / "page.png")
    picture = image.open(io.BytesIO(png.read_bytes())).convert("RGB")
    width, height = picture.size
    mark = tuple(int(END_MARK[i:i + 2], 16) for i in (1, 3, 5))
    bottom = picture.crop((0, height - 80, width, height)).getcolors(maxcolors=width * 80)
    assert mark in {colour for _, colour in bottom}
    assert _dotfiles(tmp_path) == []


@pytest.mark.parametrize("binary", ["false", "/nonexistent/chromium"],
                         ids=["browser-fails", "browser-missing"])
def test_without_a_measurement_the_estimate_is_used(tmp_path, binary):
    html = _tall_page(tmp_path)
    assert shot.measured_height(binary, html, timeout_s=30) is None
    assert _dotfiles(tmp_path) == []
