"""Screenshots of a web page in headless Chromium, driven over the DevTools protocol (``view --screenshot``, the
viewer's tests).

Chromium is the system's (Debian's ``chromium`` package: ``/usr/bin/chromium``; nothing is downloaded), started
headless with software WebGL (SwiftShader through ANGLE), so it renders three.js scenes on machines without a GPU
or display. The protocol runs over the ``websockets`` client viser already depends on.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

from sim2real.configs.durable import atomic_write_bytes

#: Where Chromium is looked for, in order (``$SIM2REAL_CHROMIUM`` first when set).
CHROMIUM_NAMES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Software WebGL: ANGLE on SwiftShader (Chromium's CPU rasteriser).
SOFTWARE_GL_FLAGS = ("--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist")
#: The error without a Chromium.
NO_CHROMIUM = "no Chromium found (apt-get install chromium, or set SIM2REAL_CHROMIUM)"
_DEVTOOLS = re.compile(r"DevTools listening on (ws://\S+)")


class BrowserError(RuntimeError):
    """Chromium is missing, did not start, or a DevTools call failed (the message says which)."""


def find_chromium() -> str | None:
    """Path of the Chromium to use: ``$SIM2REAL_CHROMIUM`` when set, else the first of :data:`CHROMIUM_NAMES`
    found, or None.

    Raises:
        BrowserError: ``$SIM2REAL_CHROMIUM`` names no executable (it is not silently passed over for another).
    """
    named = os.environ.get("SIM2REAL_CHROMIUM")
    if named:
        path = shutil.which(named)
        if path is None:
            what = ("is a folder" if os.path.isdir(named) else "is not executable" if os.path.exists(named) else
                    "does not exist" if os.sep in named else "is not on PATH")
            raise BrowserError(f"SIM2REAL_CHROMIUM={named}: {what} (name Chromium's executable, or unset it to use "
                               f"the system's)")
        return path
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class HeadlessChromium:
    """One headless Chromium with one page, driven over the DevTools protocol; a context manager (closing ends the
    browser and removes its temporary profile).

    Args:
        size: the page's viewport (width, height) px.
        executable: Chromium's path (default :func:`find_chromium`).
        timeout: seconds to wait for the browser to start and for each protocol call.

    Raises:
        BrowserError: no Chromium (or a bad ``$SIM2REAL_CHROMIUM``), or it did not start within ``timeout``.
    """

    def __init__(self, size: tuple[int, int] = (1280, 800), executable: str | None = None, timeout: float = 30.0):
        from websockets.sync.client import connect

        exe = executable or find_chromium()
        if exe is None:
            raise BrowserError(NO_CHROMIUM)
        self.timeout, self._id = float(timeout), 0
        self._profile = tempfile.mkdtemp(prefix="sim2real-chromium-")
        args = [exe, "--headless", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={self._profile}", f"--window-size={int(size[0])},{int(size[1])}",
                "--hide-scrollbars", "--no-first-run", "--no-default-browser-check", "--mute-audio",
                "--disable-extensions", "--disable-background-networking", *SOFTWARE_GL_FLAGS, "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, errors="replace")
        try:
            browser_ws = self._devtools_url()
            port = int(re.match(r"ws://[^:/]+:(\d+)/", browser_ws).group(1))
            deadline = time.monotonic() + self.timeout
            while True:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=self.timeout) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                if pages or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if not pages:
                raise BrowserError("Chromium started without a page")
            self._ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=self.timeout)
            self.call("Page.enable")
            self.call("Emulation.setDeviceMetricsOverride", width=int(size[0]), height=int(size[1]),
                      deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    def _devtools_url(self) -> str:
        """Read Chromium's stderr until it names its DevTools endpoint; then keep draining it in a thread."""
        found: list[str] = []
        lines: list[str] = []
        ready = threading.Event()

        def drain() -> None:
            for line in self._proc.stderr:
                if not found:
                    lines.append(line)
                    match = _DEVTOOLS.search(line)
                    if match:
                        found.append(match.group(1))
                        ready.set()
            ready.set()

        threading.Thread(target=drain, name="chromium-stderr", daemon=True).start()
        if not ready.wait(self.timeout) or not found:
            tail = " | ".join(s.strip() for s in lines[-3:])
            raise BrowserError(f"Chromium did not start within {self.timeout:.0f} s (exit {self._proc.poll()}): {tail}")
        return found[0]

    def _receive(self, what: str, until: Callable[[dict], bool]) -> dict:
        """Read protocol messages until ``until(message)``; the others (events, earlier replies) are dropped."""
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"DevTools {what}: nothing within {self.timeout:.0f} s")
            try:
                msg = json.loads(self._ws.recv(timeout=left))
            except TimeoutError:
                continue
            if until(msg):
                return msg

    def call(self, method: str, **params) -> dict:
        """One DevTools call; returns its result (events arriving meanwhile are dropped).

        Raises:
            BrowserError: an error reply, or none within ``timeout``.
        """
        self._id += 1
        call_id = self._id
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        msg = self._receive(method, lambda m: m.get("id") == call_id)
        if "error" in msg:
            raise BrowserError(f"DevTools {method}: {msg['error'].get('message', msg['error'])}")
        return msg.get("result", {})

    def navigate(self, url: str) -> None:
        """Open ``url`` in the page and wait for its load event (then poll for what else you need).

        Raises:
            BrowserError: the page cannot be opened, or did not load within ``timeout``.
        """
        result = self.call("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"cannot open {url}: {result['errorText']}")
        self._receive(f"load of {url}", lambda m: m.get("method") == "Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript ``expression`` in the page (JSON-serialisable values)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"JavaScript error: {result['exceptionDetails'].get('text', '?')}")
        return result.get("result", {}).get("value")

    def screenshot(self) -> bytes:
        """The page's viewport as PNG bytes."""
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def settled_screenshot(self, min_wait_s: float = 1.0, timeout: float = 30.0, interval_s: float = 0.5,
                           ready: Callable[[], bool] | None = None) -> bytes:
        """A screenshot once the page has stopped changing: after ``ready()`` (if given) is true and ``min_wait_s``
        more, the first of two consecutive identical screenshots ``interval_s`` apart (at ``timeout``: the last).

        Raises:
            BrowserError: ``ready()`` not true within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while ready is not None and not ready():
            if time.monotonic() > deadline:
                raise BrowserError(f"the page was not ready within {timeout:.0f} s")
            time.sleep(0.1)
        time.sleep(min_wait_s)
        last = self.screenshot()
        while time.monotonic() < deadline:
            time.sleep(interval_s)
            shot = self.screenshot()
            if shot == last:
                return shot
            last = shot
        return last

    def close(self) -> None:
        """End the browser and remove its profile (idempotent)."""
        ws = getattr(self, "_ws", None)
        if ws is not None:
            try:
                ws.close()
            except Exception:  # already gone with the browser
                pass
            self._ws = None
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "HeadlessChromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: JavaScript removing viser's notifications (the "software WebGL" notice) from a screenshot.
HIDE_NOTIFICATIONS_JS = ("document.querySelectorAll('.mantine-Notifications-root, [class*=Notification]')"
                         ".forEach(e => e.remove()); true")


def screenshot_page(url: str, path: str | os.PathLike, size: tuple[int, int] = (1280, 800),
                    ready: Callable[[], bool] | None = None, min_wait_s: float = 2.0, timeout: float = 60.0) -> Path:
    """Open ``url`` in headless Chromium and write a settled screenshot (:meth:`HeadlessChromium.settled_screenshot`)
    to ``path`` as PNG (missing folders are made). Returns ``path``.

    Raises:
        BrowserError: no Chromium, or the page could not be opened or was not ready within ``timeout``.
    """
    path = Path(path)
    with HeadlessChromium(size) as browser:
        browser.navigate(url)
        png = browser.settled_screenshot(min_wait_s=min_wait_s, timeout=timeout, ready=ready)
        try:
            browser.evaluate(HIDE_NOTIFICATIONS_JS)
            png = browser.settled_screenshot(min_wait_s=0.2, timeout=5.0)
        except BrowserError:
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, png)
    return path
