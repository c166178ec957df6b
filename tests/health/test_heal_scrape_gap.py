"""`rackform heal` against a Prometheus that scrapes live exporters (on loopback), where a
scrape fails: Prometheus then marks every series of that target stale at once, and an instant
query sees none of them. A node whose exporter just timed out (under I/O trouble, an exporter is
slow) must still be judged on what it last said: a failed scrape is a gap, never a fault
cleared. And what a node that answers no longer says (a check passing again: its series gone)
is gone, whoever else fails a scrape.

The exporters are this test's: node_exporter's text format with the series heal reads for a
node without GPUs (its boot time, the checkpoint filesystem's read-only flag, the slurm role's
failed-check series), each node's from its own port."""

from __future__ import annotations

import http.server
import json

import pytest
import yaml
from blueprint_helpers import rackform
from loopback import http_server
from servers import query, scraping, wait_for
from test_heal_cmd import cpu_blueprint

pytestmark = pytest.mark.slow

NAME = "cpu-farm-gap"
MOUNT = "/mnt/ckpt-a"
LABELS = {"cluster": NAME, "environment": "default", "purpose": "training"}


def exposition(ro: int, failed_checks: tuple[str, ...]) -> str:
    lines = [
        "# TYPE node_boot_time_seconds gauge",
        "node_boot_time_seconds 1.7e+09",
        "# TYPE node_filesystem_readonly gauge",
        f'node_filesystem_readonly{{device="md0",fstype="xfs",mountpoint="{MOUNT}"}} {ro}',
        "# TYPE rackform_node_check_failed gauge",
        *(f'rackform_node_check_failed{{check="{c}"}} 1' for c in failed_checks),
    ]
    return "\n".join(lines) + "\n"


class Exporter:
    """One node's exporter: what it says, and whether it answers at all."""

    def __init__(self, ro: int = 0, failed_checks: tuple[str, ...] = ()) -> None:
        self.ro, self.failed_checks, self.answers = ro, failed_checks, True

    def handler(self):
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if not exporter.answers:
                    self.send_error(503)
                    return
                body = exposition(exporter.ro, exporter.failed_checks).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        return Handler


def blueprint(tmp_path, hosts: list[str]):
    addresses = {h: f"10.7.1.{i}" for i, h in enumerate(hosts, 1)}
    return cpu_blueprint(
        tmp_path, NAME, addresses, "{storage: reboot, validation: drain}", 3, MOUNT
    )


def scrape_configs(ports: dict[str, int]) -> str:
    return yaml.safe_dump(
        [{
            "job_name": "node",
            "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {**LABELS, "node": node}}
                for node, port in ports.items()
            ],
        }],
        sort_keys=False,
    )  # fmt: skip


def verdicts(url: str, bp) -> dict[str, tuple[str, str, list[str]]]:
    r = rackform("heal", bp, "--prometheus", url, "--json")
    doc = json.loads(r.stdout)
    return {
        n["node"]: (n["verdict"], n["action"], [e["detail"] for e in n["evidence"]])
        for n in doc["clusters"][0]["nodes"]
    }


def test_a_node_whose_scrape_fails_is_judged_on_what_it_last_said(tmp_path):
    # gap-ro: read-only checkpoint filesystem, then its exporter stops answering.
    # gap-ok: healthy, then its exporter stops answering: still healthy, not failed.
    # fixed: a failed check that passes again (its series gone) while the others fail scrapes.
    # ro-live: read-only, answering throughout (the plain case).
    exporters = {
        "gap-ro": Exporter(ro=1),
        "gap-ok": Exporter(),
        "fixed": Exporter(failed_checks=("checkpoint_mount",)),
        "ro-live": Exporter(ro=1),
    }
    bp = blueprint(tmp_path, list(exporters))
    with (
        http_server(exporters["gap-ro"].handler()) as p1,
        http_server(exporters["gap-ok"].handler()) as p2,
        http_server(exporters["fixed"].handler()) as p3,
        http_server(exporters["ro-live"].handler()) as p4,
    ):
        ports = dict(zip(exporters, (p1, p2, p3, p4), strict=True))
        with scraping(scrape_configs(ports), tmp_path / "prom", interval_s=1) as url:
            wait_for(url, f'up{{cluster="{NAME}"}} == 1', 4, "every exporter scraped", 60, 0.5)
            before = verdicts(url, bp)
            assert before == {
                "gap-ro": ("failed", "reboot", [f"the checkpoint filesystem {MOUNT} is read-only"]),
                "gap-ok": ("healthy", "none", []),
                "fixed": ("failed", "reboot", ["Slurm's health check fails checkpoint_mount on the node"]),
                "ro-live": ("failed", "reboot", [f"the checkpoint filesystem {MOUNT} is read-only"]),
            }, before  # fmt: skip

            exporters["gap-ro"].answers = exporters["gap-ok"].answers = False
            exporters["fixed"].failed_checks = ()
            wait_for(url, f'up{{cluster="{NAME}"}} == 0', 2, "two scrapes failing", 60, 0.5)
            checks = f'rackform_node_check_failed{{cluster="{NAME}"}}'
            wait_for(url, checks, 0, "the check passing again", 60, 0.5)
            # What an instant query sees now: nothing of the two silent targets.
            assert query(url, 'node_filesystem_readonly{node="gap-ro"}') == []
            after = verdicts(url, bp)
    assert after == {
        "gap-ro": ("failed", "reboot", [f"the checkpoint filesystem {MOUNT} is read-only"]),
        "gap-ok": ("healthy", "none", []),
        "fixed": ("healthy", "none", []),
        "ro-live": ("failed", "reboot", [f"the checkpoint filesystem {MOUNT} is read-only"]),
    }, after
