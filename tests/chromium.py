"""Debian's headless chromium over the DevTools protocol, for the tests that open a page as a
person would (the documentation site, `rackform report`'s page): the browser on a profile of the
test's own, a page's few DevTools calls, and what went wrong on it (a console error, an
exception, a failed load, a request off this machine)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


@contextmanager
def browser(tmp_path: Path) -> Iterator[str]:
    """Headless chromium with its DevTools port; the websocket URL of its first page."""
    profile = tmp_path / "profile"
    proc = subprocess.Popen(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None, f"chromium exited: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port in 30 s"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        targets = json.load(
            urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10)
        )
        yield next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


CALL_TIMEOUT_S = 60


class Page:
    """The few DevTools calls the test needs, over one websocket."""

    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.n = 0
        self.events: list[dict] = []

    def call(self, method: str, **params) -> dict:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        # Its own time to answer: `settle` and `wait_for` leave the socket's timeout at what was
        # left of theirs (a fraction of a second), which a screenshot on a busy machine exceeds.
        self.ws.settimeout(CALL_TIMEOUT_S)
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            assert time.monotonic() < deadline, f"no {method} in {timeout} s"
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            self.events.append(json.loads(self.ws.recv()))

    def settle(self, seconds: float) -> None:
        """Collect events for a while (mermaid draws after the load event)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.ws.settimeout(left)
            try:
                self.events.append(json.loads(self.ws.recv()))
            except Exception:  # the timeout: nothing more came
                break

    def until(self, expr: str, want, timeout: float = 30):
        """Evaluate `expr` until it gives `want` (collecting events meanwhile); its last value."""
        deadline = time.monotonic() + timeout
        while (got := self.eval(expr)) != want and time.monotonic() < deadline:
            self.settle(0.25)
        return got

    def eval(self, expr: str):
        return self.call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get(
            "value"
        )


def problems(events: list[dict], origin: str) -> list[str]:
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            out.append(
                "console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
            )
        elif m == "Runtime.exceptionThrown":
            out.append(
                "exception: "
                + p["exceptionDetails"].get("text", "")
                + " "
                + str(p["exceptionDetails"].get("exception", {}).get("description", ""))
            )
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")
        elif m == "Network.requestWillBeSent" and not p["request"]["url"].startswith(
            (origin, "data:", "blob:")
        ):
            out.append(f"request off this machine: {p['request']['url']}")
        elif m == "Network.loadingFailed":
            out.append(f"load failed: {p.get('errorText')}")
    return out
