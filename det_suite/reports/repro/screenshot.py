"""A picture of the HTML report, taken in a headless browser: Playwright when it is
importable (full page), else a Chromium / Chrome binary on PATH (`--headless
--screenshot`). Neither is a dependency of det-suite; without both the error says how to
get one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome",
            "google-chrome-stable")
WIDTH = 1280
LINE_PX, IMAGE_WIDTH_PX = 30, 1100      # what a row of text and a full-width plot take


class ScreenshotUnavailable(RuntimeError):
    pass


def page_height(html: str) -> int:
    """A window tall enough for the whole page (the browser's command line has no full-page
    mode): text rows and headings, plus each embedded PNG at the page's width."""
    import base64
    import re
    import struct

    rows = sum(html.count(tag) for tag in ("<tr", "<li", "<h1", "<h2", "<h3", "<p"))
    height = 200 + LINE_PX * rows
    for data in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html):
        width, tall = struct.unpack(">II", base64.b64decode(data[:32])[16:24])
        height += int(tall * min(1.0, IMAGE_WIDTH_PX / max(width, 1))) + 20
    return height


def _playwright(html: Path, png: Path, executable: str | None) -> bool:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return False
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable) if executable \
            else p.chromium.launch()
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.goto(html.resolve().as_uri())
            page.screenshot(path=str(png), full_page=True)
        finally:
            browser.close()
    return True


def browser_binary() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def screenshot(html, png, *, timeout_s: float = 120.0) -> tuple[Path, str]:
    """Render `html` to `png`; returns (png, which tool took it)."""
    html, png = Path(html), Path(png)
    binary = browser_binary()
    try:
        if _playwright(html, png, binary):
            return png, "playwright" + (f" ({binary})" if binary else "")
    except Exception as exc:  # noqa: BLE001 - a browser Playwright cannot start: try the CLI
        if binary is None:
            raise ScreenshotUnavailable(f"playwright could not take the screenshot: {exc}") \
                from None
    if binary is None:
        raise ScreenshotUnavailable(
            "no headless browser: install playwright (pip install playwright) with a browser "
            "it can launch, or a chromium binary on PATH (apt-get install chromium)")
    tmp = png.with_name(f".{png.name}.tmp.png")
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--window-size={WIDTH},{page_height(html.read_text(encoding='utf-8'))}",
               f"--screenshot={tmp}", html.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or not tmp.exists():
        raise ScreenshotUnavailable(f"{binary} failed (exit {done.returncode}): "
                                    f"{done.stderr.strip()[-500:]}")
    tmp.replace(png)
    return png, binary
