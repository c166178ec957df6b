"""`rackform heal --evidence FILE`: the cluster's last validation (the Validate stage's statement,
as `pulumi stack output evidence --json` saves it) read for each node: slower than its node
group's median there (`node_perf`) is a performance fault (monitor: suspect, never acted on
by default), another failed check of its own a validation fault (drain). Against a real
Prometheus (every node's GPUs reporting, healthy), with the inputs that try to fool it: a node
rackform re-validated since, a statement of another stack, a second one, a file that is none."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from blueprint_helpers import rackform
from servers import prometheus
from test_heal_cmd import blueprint, by_node, gpus

from rackform.acceptance.cluster import merge_reports
from rackform.evidence.statement import attest
from rackform.lifecycle.record import Store

pytestmark = pytest.mark.slow

NAME = "dc-v"
NODES = [f"{NAME}-{i:02d}" for i in range(1, 11)]
WHEN = datetime.now(UTC) - timedelta(hours=2)


def node_report(node: str) -> dict:
    slow = 0.55 if node == f"{NAME}-03" else 1.0
    ecc = 2 if node == f"{NAME}-07" else 0
    return {
        "checks": [
            {"name": "ecc_uncorrectable", "status": "fail" if ecc else "pass", "measured": ecc,
             "expected": 0, "unit": "errors", "op": "<=", "detail": f"{ecc} on GPU 1" if ecc else ""},
            {"name": "dcgm_diag", "status": "not-run", "measured": None, "expected": None,
             "detail": "dcgmi is not installed"},
        ],
        "metrics": {"node_perf": {"matmul_tflops": 700 * slow, "h2d_gbps": 50.0}},
    }  # fmt: skip


def saved(tmp_path, stack: str = f"{NAME}-default", name: str = "evidence.json"):
    report = merge_reports(
        NODES, {n: node_report(n) for n in NODES}, 0, dict.fromkeys(NODES, "hgx-pool")
    )
    about = {"stack": stack, "cluster": NAME, "environment": "default", "pin": {"blueprint": "x"}}
    env = attest(report, about, NODES, now=WHEN, environ={})
    path = tmp_path / name
    path.write_text(json.dumps(env))
    return path


def heal(url, *args):
    r = rackform("heal", *args, "--prometheus", url, "--json")
    return r, (json.loads(r.stdout) if r.stdout.strip() else None)


def test_a_slow_node_is_suspect_and_a_failed_check_drains(tmp_path):
    bp = blueprint(tmp_path, NAME)
    state = tmp_path / "state"
    with prometheus(gpus(NAME, range(1, 11)), tmp_path / "prom") as url:
        r, doc = heal(url, bp, "--evidence", saved(tmp_path), "--state-dir", state)
        assert r.returncode == 6, r.stderr
        got = by_node(doc)
        slow, bad = got[f"{NAME}-03"], got[f"{NAME}-07"]
        assert (slow["verdict"], slow["action"], slow["acts"]) == ("suspect", "monitor", False)
        (e,) = slow["evidence"]
        assert e["fault"] == "performance" and e["series"] == "rackform validation report"
        assert "node_perf failed in the validation of" in e["detail"]
        assert (
            "matmul 385 TFLOPS = 0.55 x the median of node group hgx-pool (700, 10 nodes)"
            in e["detail"]
        )
        assert (bad["verdict"], bad["action"], bad["acts"]) == ("failed", "drain", True)
        assert "ecc_uncorrectable failed" in bad["evidence"][0]["detail"]
        # A check that did not run says nothing; everyone else is healthy.
        assert {n for n, v in got.items() if v["verdict"] != "healthy"} == {
            f"{NAME}-03",
            f"{NAME}-07",
        }

        # rackform re-validated node 07 since (a heal batch passed): the old report is not its.
        Store(state, f"{NAME}-default", kind="heal").audit(
            "batch", kind="heal", batch=1, nodes=[f"{NAME}-07"], status="validated", why=""
        )
        r, doc = heal(url, bp, "--evidence", saved(tmp_path), "--state-dir", state)
        assert by_node(doc)[f"{NAME}-07"]["verdict"] == "healthy", doc
        assert by_node(doc)[f"{NAME}-03"]["verdict"] == "suspect"


def test_a_statement_that_is_not_this_clusters_is_refused(tmp_path):
    bp = blueprint(tmp_path, NAME)
    other = saved(tmp_path, stack="dc-x-default", name="other.json")
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    garbled = tmp_path / "garbled.json"  # an envelope whose payload is no statement
    garbled.write_text(
        json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": "aGk="})
    )
    with prometheus(gpus(NAME, range(1, 11)), tmp_path / "prom") as url:
        for args, said in (
            ((other,), "the validation of stack dc-x-default, which none of the blueprints makes"),
            ((junk,), "not evidence (not JSON"),
            ((listed,), "not a rackform validation statement (SigningError"),
            ((garbled,), "not a rackform validation statement (JSONDecodeError"),
            ((saved(tmp_path), saved(tmp_path, name="again.json")), "a second validation of stack"),
        ):
            r, doc = heal(url, bp, *[a for p in args for a in ("--evidence", p)])
            assert r.returncode == 2 and doc is None, r.stdout
            assert said in r.stderr and "Traceback" not in r.stderr, r.stderr
