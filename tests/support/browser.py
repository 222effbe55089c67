"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe).

No extra dependency: the browser reads commands on fd 3 and writes replies on fd 4, NUL-separated JSON.
``Browser.visit`` opens one page, collects console errors, uncaught exceptions, error log entries and
requests that leave the machine, waits until every plotly div has rendered, and saves a screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-pipe",
]
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")
# True once every plotly div on the page has drawn its SVG; also counts them.
PLOTS_READY = """(() => {
  const divs = Array.from(document.querySelectorAll('.plotly-graph-div'));
  const done = divs.filter(d => d._fullLayout && d.querySelector('.main-svg'));
  return JSON.stringify({ready: document.readyState === 'complete' && done.length === divs.length, plots: divs.length});
})()"""


def find_chromium() -> str | None:
    """Path of Debian's chromium (or a chromium on PATH), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Visit:
    """What one page did in the browser."""

    url: str
    plots: int
    errors: list[str] = field(default_factory=list)
    remote_requests: list[str] = field(default_factory=list)
    screenshot: Path | None = None
    text: str = ""
    result: Any = None


class Browser:
    """One headless Chromium process with a fresh profile; use as a context manager."""

    def __init__(self, executable: str, profile: Path, timeout: float = 60.0) -> None:
        self.timeout = timeout
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds_3_and_4() -> None:  # runs in the child before exec
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=fds_3_and_4,
            pass_fds=(3, 4),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
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

    def _read(self) -> None:
        buffer = b""
        with os.fdopen(self._from_child, "rb", buffering=0) as stream:
            while chunk := stream.read(1 << 16):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        with self._lock:
                            self._replies[message["id"]] = message
                            self._lock.notify_all()
                    else:
                        self._events.put(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply; raises on a protocol error."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while self._next_id not in self._replies:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"chromium exited with {self.proc.returncode} during {method}")
                if not self._lock.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"no reply to {method} in {self.timeout} s")
            reply = self._replies.pop(self._next_id)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def _evaluate(self, expression: str, session: str) -> Any:
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression!r}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def _drain(self, session: str, visit: Visit) -> list[dict[str, Any]]:
        """Move pending events of this page into the visit's error lists; return them."""
        events = []
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return events
            if event.get("sessionId") != session:
                continue
            events.append(event)
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                visit.errors.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                visit.errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                visit.errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")
            elif method == "Network.requestWillBeSent" and not params["request"]["url"].startswith(LOCAL_SCHEMES):
                visit.remote_requests.append(params["request"]["url"])

    def visit(
        self,
        page: Path | str,
        screenshot: Path | None = None,
        script: str | None = None,
        width: int = 1280,
        max_height: int = 16000,
        ready: str = PLOTS_READY,
    ) -> Visit:
        """Load a local page (or a URL), wait for every plot, collect errors; optionally run a script (its
        JSON-able value goes to ``result``) and save a full-page screenshot. ``ready`` is the script that says
        when the page has rendered: JSON ``{"ready": bool, "plots": int}``, by default every plotly div drawn."""
        url = page if isinstance(page, str) else page.resolve().as_uri()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        visit = Visit(url=url, plots=0)
        try:
            for domain in ("Runtime", "Log", "Page", "Network"):
                self.send(f"{domain}.enable", session=session)
            self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)
            self.send("Page.navigate", {"url": url}, session)
            deadline = time.monotonic() + self.timeout
            while True:
                self._drain(session, visit)
                state = json.loads(self._evaluate(ready, session))
                if state["ready"]:
                    visit.plots = state["plots"]
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{url}: plots not rendered after {self.timeout} s ({state})")
                time.sleep(0.2)
            visit.text = self._evaluate("document.body.innerText", session)
            if script is not None:
                visit.result = self._evaluate(script, session)
            if screenshot is not None:
                size = self.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
                height = min(int(size["height"]) + 1, max_height)
                self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
                time.sleep(0.5)  # let plotly's responsive relayout settle at the new size
                data = self.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                screenshot.write_bytes(base64.b64decode(data))
                visit.screenshot = screenshot
            self._drain(session, visit)
        finally:
            self.send("Target.closeTarget", {"targetId": target})
        return visit
