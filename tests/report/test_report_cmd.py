"""`rackform report`: the page made from a real Prometheus (backfilled dcgm-exporter history), a
job-records file, a goodput file and the stack's audit log written by heal's own writer, each
figure on it computed by hand; what came from a log or a scheduler escaped; and the page opened
in Debian's headless chromium as a person would open it (a file), its pictures drawn, nothing
requested from anywhere."""

from __future__ import annotations

import base64
import json
import time

import chromium
import pytest
import yaml
from blueprint_helpers import rackform
from chromium import Page, problems
from servers import Gpu, prometheus

from rackform.lifecycle.record import Store

BP = """\
name: dc-a
purpose: training
owner: ops@example.com
target: {type: bare_metal}
node_groups:
  - name: gpu
    gpu: H100-SXM
    gpus_per_node: 8
    hosts: [{name: gpu-a-01, address: 10.9.0.1}, {name: gpu-a-02, address: 10.9.0.2}]
network: {fabric: ethernet}
lifecycle:
  idle: {gpu_util_below_pct: 50, for_minutes: 60, action: notify}
"""
HOSTILE = "<img src=http://198.51.100.7/x onerror=alert(1)>"
JOBS = f"""\
JobID|User|Account|Partition|State|Start|End|ElapsedRaw|AllocTRES|NodeList
41|alice|ml|batch|COMPLETED|2026-11-25T10:00:00|2026-11-25T12:00:00|7200||gpu-a-0[1-2]
42|bob|research|batch|COMPLETED|2026-11-25T12:00:00|2026-11-25T13:00:00|3600||{HOSTILE}
"""
FIGURES = 5  # utilization, cost, failures a day, time to repair, goodput


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The page, and the command's result."""
    tmp = tmp_path_factory.mktemp("report")
    bp = tmp / "dc-a.yaml"
    bp.write_text(BP)
    now = time.time()
    t0 = now - 2 * 86400
    store = Store(tmp / "state", "dc-a-default", kind="heal")
    store.audit("heal", kind="heal", nodes={"gpu-a-01": "reboot", "gpu-a-02": "reset"}, ts=t0)
    store.audit("batch", kind="heal", nodes=["gpu-a-01"], status="done", ts=t0 + 600)
    store.audit("batch", kind="heal", nodes=["gpu-a-02"], status="done", ts=t0 + 900)
    store.audit("ticket", kind="heal", node=HOSTILE, action="drain", ts=t0 + 86400)
    jobs = tmp / "sacct.txt"
    jobs.write_text(JOBS)
    goodput = tmp / "goodput.yaml"
    lost = {"redone work": 30.0, "restarts": 10.0, "<script>alert(1)</script>": 10.0}
    goodput.write_text(yaml.safe_dump({"dc-a-default": {"lost": lost, "paid_gpu_hours": 1000}}))
    # Seven hours of history (six shown, each hour whole): GPU 0 at 40%, below the idle
    # policy's 50%, GPU 1 at 80%.
    gpus = [
        Gpu("dc-a", "default", "training", "gpu-a-01", i, util, start_min=420)
        for i, util in ((0, 40.0), (1, 80.0))
    ]
    with prometheus(gpus, tmp / "prom", now) as url:
        r = rackform("report", bp, "-o", tmp / "report.html", "--state-dir", tmp / "state",
                     "--prometheus", url, "--hours", "6", "--jobs", f"dc-a-default={jobs}",
                     "--goodput", goodput)  # fmt: skip
    return tmp / "report.html", r


def test_the_page_holds_the_figures_computed_by_hand(made):
    path, r = made
    assert r.returncode == 0, r.stderr
    html = path.read_text()
    rows = dict(
        (a, b)
        for a, b in (
            line.removeprefix("<tr><th>").removesuffix("</td></tr>").split("</th><td>")
            for line in html.splitlines()
            if line.startswith("<tr><th>")
        )
    )
    assert rows["failures"] == "3 (1 not returned)"
    assert rows["mean time to repair"] == "0.21 h"  # (600 + 900) / 2 s
    assert rows["mean time between failures"] == "12.00 h"  # 0, 0, 86400: two gaps
    assert rows["mean GPU utilization"] == "60.0% (target 85%)"  # (40 + 80) / 2
    assert rows["idle GPU-hours"] == "6.0"  # GPU 0, each of the six hours
    # No GPUs in the records' TRES: each job is charged every GPU of its nodes (16 x 2 h);
    # the second job's nodes are none of the blueprint's.
    assert rows["jobs"] == "2: 32.0 GPU-hours"
    assert rows["goodput"] == "95.0%"  # 1 - 50 / 1000
    assert html.count("<svg") == FIGURES


def test_what_came_from_a_log_is_escaped(made):
    path, _ = made
    html = path.read_text()
    assert (
        "<img" not in html
        and "<script" not in html
        and "198.51.100.7"
        not in html.replace("&lt;img src=http://198.51.100.7/x onerror=alert(1)&gt;", "")
    )
    assert "&lt;img src=http://198.51.100.7/x onerror=alert(1)&gt;" in html  # the jobs' note


def test_the_page_opens_offline_in_a_browser_with_its_pictures(made, tmp_path):
    if not chromium.CHROMIUM.exists():
        pytest.fail("/usr/bin/chromium is missing: run scripts/setup.sh --test")
    path, _ = made
    url = path.as_uri()
    with chromium.browser(tmp_path) as ws:
        page = Page(ws)
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                page.call(f"{domain}.enable")
            page.call("Page.navigate", url=url)
            page.wait_for("Page.loadEventFired")
            page.settle(0.5)
            sizes = page.eval(
                "JSON.stringify([...document.querySelectorAll('figure svg')].map(s => {"
                "const r = s.getBoundingClientRect(); return [r.width, r.height,"
                " s.querySelectorAll('path').length]; }))"
            )
            shot = tmp_path / "report.png"
            shot.write_bytes(
                base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
            )
            print(f"screenshot: {shot}")
            assert problems(page.events, url) == []
        finally:
            page.ws.close()
    drawn = json.loads(sizes)
    assert len(drawn) == FIGURES
    assert all(w > 300 and h > 100 and paths > 10 for w, h, paths in drawn), drawn
