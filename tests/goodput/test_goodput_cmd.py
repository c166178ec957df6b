"""`rackform goodput`: the document, the table, measured inputs from a saved statement and an
audit log, and what it refuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import yaml
from typer.testing import CliRunner

from rackform.acceptance.cluster import merge_reports
from rackform.cli.main import app
from rackform.evidence.statement import attest
from rackform.goodput.simulate import CAUSES

TRAINING = "blueprints/baremetal-training.yaml"  # 4 hosts of 8 H100s: dc1-train
STACK = "dc1-train-default"


def run(*args):
    return CliRunner().invoke(app, ["goodput", *map(str, args)])


def statement(tmp_path, stack: str, speeds: dict[str, float]):
    reports = {
        n: {"checks": [{"name": "checkpoint_write", "status": "pass", "measured": v,
                        "expected": 1.0, "unit": "GB/s", "op": ">=", "detail": ""}],
            "metrics": {}}
        for n, v in speeds.items()
    }  # fmt: skip
    report = merge_reports(list(speeds), reports, 0, dict.fromkeys(speeds, "hgx"))
    about = {"stack": stack, "cluster": "dc1-train", "environment": "default", "pin": {}}
    env = attest(report, about, list(speeds), now=datetime.now(UTC), environ={})
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(env))
    return path


def test_json_holds_both_modes_theory_and_assumptions(tmp_path):
    r = run(TRAINING, "--days", "2", "--seed", "3", "--json", "--state-dir", tmp_path)
    assert r.exit_code == 0, r.output
    (doc,) = json.loads(r.output)["clusters"]
    assert (doc["file"], doc["scenario"], doc["nodes"], doc["gpus_per_node"]) == (
        TRAINING, STACK, 4, 8,
    )  # fmt: skip
    assert doc["paid_gpu_hours"] == 4 * 8 * 48
    for mode in ("requeue", "elastic"):
        m = doc["modes"][mode]
        assert set(m["lost_gpu_hours"]) == set(CAUSES) and 0 < m["goodput"] <= 1
    assert doc["failures"]["source"].startswith("catalog: llama3-2024")
    assert doc["published"]["hyperpod_goodput_claim"]["value"] == 0.95
    assert doc["assumptions"]["relaunch_s"] == 300
    again = run(TRAINING, "--days", "2", "--seed", "3", "--json", "--state-dir", tmp_path)
    assert again.output == r.output  # seeded


def test_text_and_markdown(tmp_path):
    r = run(TRAINING, "--days", "1", "--state-dir", tmp_path)
    assert r.exit_code == 0, r.output
    assert "requeue-only" in r.output and "waiting for capacity" in r.output
    assert "SageMaker HyperPod claims up to 95.0% goodput" in r.output
    r = run(TRAINING, "blueprints/aws-training.yaml", "--days", "1", "--markdown",
            "--state-dir", tmp_path)  # fmt: skip
    lines = r.output.splitlines()
    assert lines[0].startswith("| blueprint |") and len(lines) == 4
    assert lines[2].startswith(f"| `{TRAINING}` | 4 x 8 |")


def test_the_clusters_own_measurements(tmp_path):
    ev = statement(tmp_path, STACK, {"hgx-01": 2.0, "hgx-02": 1.5})
    log = tmp_path / "state" / f"{STACK}.log"
    log.parent.mkdir()
    samples = [{"ts": 1e9 + h * 3600, "stack": STACK, "event": "in-service", "in_service": 4}
               for h in range(10_001)]  # fmt: skip
    samples.append({"ts": 1e9 + 50, "stack": STACK, "event": "heal", "nodes": {"hgx-02": "reboot"}})
    log.write_text("".join(json.dumps(e) + "\n" for e in samples))
    r = run(TRAINING, "--json", "--days", "1", "--evidence", ev, "--state-dir", log.parent)
    assert r.exit_code == 0, r.output
    (doc,) = json.loads(r.output)["clusters"]
    # 182 GB over 4 nodes at the slowest node's 1.5 GB/s: 30.33 s.
    assert doc["checkpoint"]["blocking_s"] == round(182 / 6, 3)
    # One failure in 40,000 node-hours in service (over the catalog's 30,000 floor).
    assert doc["failures"]["per_node_hour"] == 1 / 40_000
    assert "1 failures in 40,000 node-hours" in doc["failures"]["source"]


def test_what_it_refuses(tmp_path):
    r = run("blueprints/aws-inference.yaml", "--state-dir", tmp_path)
    assert r.exit_code == 2 and "an inference cluster runs no training job" in r.output
    # A training blueprint whose checkpoint speed nobody declared or measured: said so, with
    # the fix, not a word about its purpose.
    doc = yaml.safe_load(Path(TRAINING).read_text())
    doc["storage"]["checkpoint"].pop("write_gbps", None)
    slow = tmp_path / "unknown-speed.yaml"
    slow.write_text(yaml.safe_dump(doc))
    r = run(slow, "--state-dir", tmp_path)
    assert r.exit_code == 2 and "write speed is unknown" in r.output, r.output
    assert "storage.checkpoint.write_gbps" in r.output and "Traceback" not in r.output
    other = statement(tmp_path, "someone-else-default", {"hgx-01": 2.0})
    r = run(TRAINING, "--evidence", other, "--state-dir", tmp_path)
    assert r.exit_code == 2 and "not 'dc1-train-default'" in r.output
    r = run(TRAINING, "--interval", "sometimes")
    assert r.exit_code == 2 and "best or declared" in r.output


def test_plan_shows_the_interval_from_the_clusters_measurements(tmp_path):
    ev = statement(tmp_path, STACK, {"hgx-01": 1.5})
    r = CliRunner().invoke(app, ["plan", TRAINING, "--json", "--evidence", str(ev),
                                 "--state-dir", str(tmp_path / "state")])  # fmt: skip
    assert r.exit_code == 0, r.output
    iv = json.loads(r.output)["checkpoint_interval"]
    assert iv["checkpoint_source"] == f"measured in {ev}: 182 GB at 1.5 GB/s per node x 4 nodes"
    assert iv["failure_rate_source"].startswith("catalog: llama3-2024")  # no audit log
    r = CliRunner().invoke(app, ["plan", TRAINING, "--state-dir", str(tmp_path / "state")])
    assert "checkpoint interval: every 60 min:" in r.output
