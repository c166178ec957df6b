"""The built site in a real headless browser (Debian's chromium) over the DevTools protocol:
the front page, the blueprint reference and a guide render with no console error, no failed
load and no request off this machine; a screenshot of each is written under the test's
temporary directory (its path printed)."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from loopback import http_server

CHROMIUM = Path("/usr/bin/chromium")
PAGES = {
    "front": ("", "rackform"),
    "blueprint-reference": ("reference/blueprint/", "Blueprint reference"),
    "guide": ("guides/gitops/", "GitOps"),
}

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is missing (scripts/setup.sh --test installs it)",
)


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(built_site):
    with http_server(functools.partial(Quiet, directory=str(built_site))) as port:
        yield f"http://127.0.0.1:{port}/"


@pytest.fixture
def browser(tmp_path):
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


def test_pages_render_without_console_errors(built_site, served, browser, tmp_path):
    page = Page(browser)
    try:
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.call(f"{domain}.enable")
        for name, (path, title) in PAGES.items():
            page.events.clear()
            page.call("Page.navigate", url=served + path)
            page.wait_for("Page.loadEventFired")
            page.settle(0.5)
            assert page.eval("document.querySelector('article h1').textContent").startswith(title)
            # Every diagram is drawn by the vendored mermaid, not left as text: Material replaces
            # each <pre class="mermaid"> source with a <div class="mermaid"> holding the drawing
            # (in a closed shadow root) once mermaid has rendered it.
            diagrams = (built_site / path / "index.html").read_text().count('<pre class="mermaid">')
            if name in ("front", "guide"):
                assert diagrams >= 1, f"{name}: the page has lost its diagram"
            drawn = "document.querySelectorAll('div.mermaid').length"
            assert page.until(drawn, diagrams) == diagrams, (name, problems(page.events, served))
            if name == "blueprint-reference":
                assert page.eval("document.querySelectorAll('article table').length") > 10
            shot = tmp_path / f"{name}.png"
            shot.write_bytes(
                base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
            )
            print(f"screenshot: {shot}")
            assert problems(page.events, served) == [], name
    finally:
        page.ws.close()
