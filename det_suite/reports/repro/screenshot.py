"""A picture of the HTML report, taken in a headless browser: Playwright when it is
importable (full page), else a Chromium / Chrome binary on PATH (`--headless
--screenshot`). Neither is a dependency of det-suite; without both the error says how to
get one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome",
            "google-chrome-stable")
WIDTH = 1280
LINE_PX, IMAGE_WIDTH_PX = 30, 1100      # what a row of text and a full-width plot take
HEIGHT_ATTRIBUTE = "data-det-suite-page-height"
HEIGHT_PROBE = ("<script>document.documentElement.setAttribute("
                f"'{HEIGHT_ATTRIBUTE}', Math.ceil(document.documentElement.scrollHeight));"
                "</script>")


class ScreenshotUnavailable(RuntimeError):
    pass


def page_height(html: str) -> int:
    """An estimate of the page's height, for a browser that cannot measure it: text rows
    and headings, plus each embedded PNG at the page's width."""
    import base64
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


def _browser_flags(binary: str, height: int) -> list[str]:
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--window-size={WIDTH},{height}"]


def measured_height(binary: str, html: Path, *, timeout_s: float) -> int | None:
    """The page's height as the browser lays it out at WIDTH: a copy of the page with a
    script that writes document height into the DOM, read back through --dump-dom. None
    when the browser cannot say (the estimate is used alone then)."""
    text = html.read_text(encoding="utf-8")
    # Beside the page, so relative links resolve as they do for the page itself.
    fd, probe = tempfile.mkstemp(prefix=f".{html.stem}.", suffix=".measure.html",
                                 dir=html.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + HEIGHT_PROBE)
        done = subprocess.run([*_browser_flags(binary, 900), "--dump-dom",
                               Path(probe).resolve().as_uri()],
                              capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        if os.path.exists(probe):
            os.unlink(probe)
    found = re.search(rf'{HEIGHT_ATTRIBUTE}="(\d+)"', done.stdout)
    return int(found.group(1)) if done.returncode == 0 and found else None


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
    # The command line has no full-page mode: the window must be as tall as the page. Rows
    # that wrap make the estimate short, so the browser's own layout wins where it is taller.
    height = max(page_height(html.read_text(encoding="utf-8")),
                 measured_height(binary, html, timeout_s=timeout_s) or 0)
    command = [*_browser_flags(binary, height), f"--screenshot={tmp}", html.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or not tmp.exists():
        raise ScreenshotUnavailable(f"{binary} failed (exit {done.returncode}): "
                                    f"{done.stderr.strip()[-500:]}")
    tmp.replace(png)
    return png, binary
