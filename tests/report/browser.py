"""Drive headless Chromium over --remote-debugging-pipe (CDP): load a page, run JS, screenshot, collect errors.

No websocket, no port, no extra package: Chromium reads commands on fd 3 and
writes replies and events on fd 4, each a JSON message ended by a NUL byte.
Everything the page logs to the console, every uncaught exception, every
browser-level error entry and every request that is not file:/data:/about:
is collected, so a test can demand a clean, offline page.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field


@dataclass
class PageRun:
    console: list[tuple[str, str]] = field(default_factory=list)
    """(type, text) of every console call: log, warning, error, …"""
    exceptions: list[str] = field(default_factory=list)
    log_entries: list[tuple[str, str]] = field(default_factory=list)
    """(level, text) of browser log entries (failed loads, CSP, deprecations)."""
    requests: list[str] = field(default_factory=list)
    """URLs of requests that would leave the machine (not file:, data:, about:, blob:)."""

    def errors(self) -> list[str]:
        out = [f"console.{t}: {x}" for t, x in self.console if t in ("error", "assert", "warning")]
        out += [f"exception: {x}" for x in self.exceptions]
        out += [f"log {lvl}: {x}" for lvl, x in self.log_entries if lvl in ("error", "warning")]
        return out


class Chrome:
    def __init__(self, binary: str, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="loadgen-chrome-")
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def fds() -> None:  # the child reads commands on fd 3 and writes on fd 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
                f"--user-data-dir={self._profile}", "--remote-debugging-pipe", "about:blank"]
        self._stderr = tempfile.TemporaryFile()  # a file, so a chatty browser can never block on a full pipe
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._stderr, preexec_fn=fds, pass_fds=(3, 4))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    # ----------------------------------------------------------------- protocol
    def _send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        return self._id

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    self._stderr.seek(0)
                    err = self._stderr.read().decode(errors="replace")[-2000:]
                    raise RuntimeError(f"chromium closed the pipe: {err}")
                self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        mid = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout_s
        while True:
            msg = self._read(deadline)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method: str, session: str, timeout_s: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        for i, ev in enumerate(self.events):
            if ev.get("method") == method and ev.get("sessionId") == session:
                return self.events.pop(i)
        while True:
            msg = self._read(deadline)
            if msg.get("method") == method and msg.get("sessionId") == session:
                return msg
            self.events.append(msg)

    # ----------------------------------------------------------------- use
    def open(self, url: str, width: int = 1400, height: int = 1000) -> tuple[str, PageRun]:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.call(m, session=s)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=s)
        self.call("Page.navigate", {"url": url}, session=s)
        self.wait_event("Page.loadEventFired", s)
        self.evaluate(s, "new Promise(r => requestAnimationFrame(() => setTimeout(r, 50)))")
        return s, self.collect(s)

    def evaluate(self, session: str, expr: str):
        r = self.call("Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True},
                      session=session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluate failed: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def collect(self, session: str, into: PageRun | None = None) -> PageRun:
        run = into or PageRun()
        keep = []
        for ev in self.events:
            if ev.get("sessionId") != session:
                keep.append(ev)
                continue
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                run.console.append((p.get("type", ""), text))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                run.exceptions.append(d.get("exception", {}).get("description") or d.get("text", ""))
            elif m == "Log.entryAdded":
                e = p.get("entry", {})
                run.log_entries.append((e.get("level", ""), f"{e.get('text', '')} {e.get('url', '')}".strip()))
            elif m == "Network.requestWillBeSent":
                url = p.get("request", {}).get("url", "")
                if not url.startswith(("file:", "data:", "about:", "blob:")):
                    run.requests.append(url)
        self.events = keep
        return run

    def screenshot(self, session: str, path: str, width: int = 1400) -> tuple[int, int]:
        """Full-page PNG; returns its (width, height) in CSS pixels."""
        size = self.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
        h = int(min(size["height"], 16000))
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": h, "deviceScaleFactor": 1, "mobile": False}, session=session)
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                         session=session)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return width, h

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Chrome":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
