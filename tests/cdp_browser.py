"""Headless Chromium driven over the DevTools protocol: open a page, wait for text, read what it renders.

``--dump-dom`` snapshots before a single-page app has fetched its data; this
polls the rendered text (``document.body.innerText``) until the wanted
strings appear or the time is up, so a test sees what a person would see.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self) -> None:
        # Chromium helpers may still write to the profile as the browser exits: cleanup tolerates it.
        self.profile = tempfile.TemporaryDirectory(prefix="mf-chromium-", ignore_cleanup_errors=True)
        self.proc = subprocess.Popen(
            [chromium() or "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = Path(self.profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json() if t["type"] == "page"]
        from websockets.sync.client import connect

        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024)
        self.next_id = 0

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str) -> object:
        got = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return got.get("result", {}).get("value")

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def text(self) -> str:
        got = self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                        returnByValue=True)
        return got.get("result", {}).get("value") or ""

    def open(self, url: str, wait_for: list[str], timeout: float = 60.0) -> str:
        """Navigate and return the page text once every string in ``wait_for`` shows (or at the timeout)."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(w in text for w in wait_for):
                break
            time.sleep(0.5)
        return text

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.profile.cleanup()
