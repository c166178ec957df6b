"""The built site in a real headless browser (Debian's chromium) over the DevTools protocol:
the front page, the blueprint reference and a guide render with no console error, no failed
load and no request off this machine; a screenshot of each is written under the test's
temporary directory (its path printed)."""

from __future__ import annotations

import base64
import functools
import http.server

import chromium
import pytest
from chromium import CHROMIUM, Page, problems
from loopback import http_server

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
    with chromium.browser(tmp_path) as ws_url:
        yield ws_url


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
