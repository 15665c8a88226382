"""report.html in a real browser: headless Chromium opens it offline, every image decodes, no console error.

Chromium is driven through the DevTools protocol over ``--remote-debugging-pipe`` (JSON messages
ending in a NUL byte on the child's file descriptors 3 and 4): no websocket, no network, a fresh
profile. The test skips where no Chromium is installed (``apt-get install chromium``).

``python tests/report/test_report_browser.py REPORT.html OUT.png`` saves a screenshot of a report: the
top of the page (the tables) above the first flipped examples; of a trend.html, its top.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--remote-debugging-pipe", "--hide-scrollbars",
         "--mute-audio", "--disable-extensions")

#: What the page says about itself once loaded: images that did not decode, tables, examples.
PAGE_CHECK = """(async () => {
  const images = [...document.images];
  const failed = [];
  await Promise.all(images.map(im => im.decode().catch(() => failed.push(im.alt || im.src.slice(0, 40)))));
  return {images: images.length, failed: failed,
          unsized: images.filter(im => !(im.complete && im.naturalWidth > 0)).length,
          tables: document.querySelectorAll("table").length,
          examples: document.querySelectorAll(".example").length,
          external: [...document.querySelectorAll("[src],[href]")].map(e => e.getAttribute("src") || e.getAttribute("href"))
                     .filter(u => !u.startsWith("data:") && !u.startsWith("#"))};
})()"""


#: How trend.html lays out its plots: each one's alt when drawn narrower than its pixels or under 600 px wide, the
#: page's horizontal overflow, and the most plots side by side.
TREND_LAYOUT = """(() => {
  const plots = [...document.querySelectorAll(".plots img")];
  const rows = {};
  plots.forEach(im => { const top = im.getBoundingClientRect().top; rows[top] = (rows[top] || 0) + 1; });
  return {plots: plots.length,
          narrow: plots.filter(im => im.naturalWidth < 600 || im.getBoundingClientRect().width < im.naturalWidth)
                       .map(im => im.alt),
          overflow: document.documentElement.scrollWidth - window.innerWidth,
          side_by_side: Math.max(0, ...Object.values(rows))};
})()"""


def find_chromium() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


class Chromium:
    """A headless Chromium spoken to over the DevTools pipe; events are kept in ``events``."""

    def __init__(self, binary: str, timeout: float = 60.0):
        self.timeout, self.events, self._id, self._buffer = timeout, [], 0, b""
        self.profile = tempfile.mkdtemp(prefix="laya-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds():  # the protocol's fixed descriptors in the child: it reads 3 and writes 4
            read, write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child_r, from_child_w))
            os.dup2(read, 3)
            os.dup2(write, 4)

        # pass_fds keeps 3 and 4 open: the descriptors are closed after preexec_fn, except those
        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=fds, pass_fds=(3, 4))
        os.close(to_child_r)
        os.close(from_child_w)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed the pipe: {self.proc.stderr.read().decode()[-2000:]}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        shutil.rmtree(self.profile, ignore_errors=True)


def open_report(binary: str, page: Path, width: int = 1400, height: int = 1000) -> tuple[dict, list[str], Chromium, str]:
    """Load the page; (what PAGE_CHECK found, the console / log errors, the browser, the session id)."""
    browser = Chromium(binary)
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log"):
        browser.send(f"{domain}.enable", session=session)
    browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                        "mobile": False}, session=session)
    browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
    browser.wait_for("Page.loadEventFired")
    found = browser.send("Runtime.evaluate", {"expression": PAGE_CHECK, "awaitPromise": True, "returnByValue": True},
                         session=session)["result"]["value"]
    errors = []
    for event in browser.events:
        params = event.get("params", {})
        if event.get("method") == "Runtime.exceptionThrown":
            errors.append(params["exceptionDetails"].get("text", "exception"))
        elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(json.dumps(params.get("args", [])))
        elif event.get("method") == "Log.entryAdded" and params["entry"].get("level") == "error":
            errors.append(params["entry"].get("text", ""))
    return found, errors, browser, session


def screenshot(browser: Chromium, session: str, top: int, height: int, width: int = 1400) -> bytes:
    shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                  "clip": {"x": 0, "y": top, "width": width, "height": height,
                                                           "scale": 1}}, session=session)
    return base64.b64decode(shot["data"])


def evaluate(browser: Chromium, session: str, expression: str):
    """The value of a JavaScript expression in the page."""
    return browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                        session=session)["result"].get("value")


def save_screenshot(binary: str, page: Path, out: Path, top_px: int = 1100, examples_px: int = 1300) -> None:
    """The top of the page (tables) above the first flipped examples, as one PNG (a page without examples, such as
    trend.html: its top, at a 1280 px window)."""
    from PIL import Image

    width = 1400
    found, errors, browser, session = open_report(binary, page)
    try:
        y = evaluate(browser, session, "(document.getElementById('examples') || {}).offsetTop")
        if y is None:
            width = 1280
            browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1,
                                                                "mobile": False}, session=session)
        parts = [Image.open(io.BytesIO(screenshot(browser, session, 0, top_px, width)))]
        if y is not None:
            parts.append(Image.open(io.BytesIO(screenshot(browser, session, y, examples_px))))
    finally:
        browser.close()
    if len(parts) == 1:
        parts[0].save(out, optimize=True)
        return
    canvas = Image.new("RGB", (parts[0].width, sum(p.height for p in parts) + 8), "#888888")
    canvas.paste(parts[0], (0, 0))
    canvas.paste(parts[1], (0, parts[0].height + 8))
    canvas.save(out, optimize=True)


@pytest.fixture(scope="module")
def chromium():
    binary = find_chromium()
    if binary is None:
        pytest.skip(f"no Chromium found (looked for {', '.join(BROWSERS)}): apt-get install chromium")
    return binary


def test_report_opens_in_chromium_every_image_decodes_no_console_error(chromium, tmp_path):
    from laya_robustness.report import render_files

    from helpers.report_folders import make_run

    run = make_run(tmp_path / "run")
    html_path, _ = render_files(run["out"] / "predictions.jsonl.gz", tmp_path,
                                thresholds=Path(__file__).resolve().parents[2] / "thresholds.toml")
    found, errors, browser, session = open_report(chromium, html_path)
    try:
        shot = screenshot(browser, session, 0, 800)
    finally:
        browser.close()
    assert errors == []
    assert found["external"] == []
    assert found["failed"] == [] and found["unsized"] == 0
    page = html_path.read_text()
    assert found["images"] == page.count("<img ") > 2  # thumbnails and the two plots
    assert found["examples"] >= 5 and found["tables"] >= 5
    assert shot.startswith(b"\x89PNG") and len(shot) > 10_000


def test_a_broken_image_is_seen(chromium, tmp_path):
    """The checks can fail: an image whose bytes are not a PNG does not decode; a console error is caught."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img alt="bad" src="data:image/png;base64,AAAA">'
                    '<script>console.error("drawn wrong")</script></body></html>')
    found, errors, browser, _ = open_report(chromium, page)
    browser.close()
    assert found["failed"] == ["bad"] and found["unsized"] == 1
    assert any("drawn wrong" in e for e in errors)


def test_trend_opens_in_chromium_its_plots_shown_at_full_size_without_overflow(chromium, tmp_path):
    """trend.html of three checkpoints at a 1280 px window: every plot decodes, is shown at its own pixels (at
    least 600 wide), two side by side; the page does not scroll sideways; the screenshot is kept in tmp_path."""
    from laya_robustness.report.trend import read_checkpoints, trend_html

    from helpers.report_folders import make_checkpoints

    page = tmp_path / "trend.html"
    page.write_text(trend_html(read_checkpoints(make_checkpoints(tmp_path / "runs"))), encoding="utf-8")
    found, errors, browser, session = open_report(chromium, page, width=1280)
    try:
        layout = evaluate(browser, session, TREND_LAYOUT)
        shot = screenshot(browser, session, 0, 1400, width=1280)
    finally:
        browser.close()
    (tmp_path / "trend.png").write_bytes(shot)
    assert errors == [] and found["external"] == []
    assert found["failed"] == [] and found["unsized"] == 0
    assert found["images"] == layout["plots"] == page.read_text().count("<img ") > 10
    assert layout["narrow"] == [] and layout["overflow"] <= 0 and layout["side_by_side"] == 2, layout
    assert shot.startswith(b"\x89PNG") and len(shot) > 10_000


if __name__ == "__main__":
    save_screenshot(find_chromium() or sys.exit("no Chromium found"), Path(sys.argv[1]), Path(sys.argv[2]))
