"""`rackform reap` end to end against real servers on 127.0.0.1: Prometheus over three hours of
backfilled dcgm-exporter history (busy, idle, stalled, partially missing, stale, young,
protected and mixed clusters), sushy-tools' Redfish emulator as the hosts' BMCs, and Alertmanager
for notify. The reaper reaches each over HTTP exactly as in production."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from blueprint_helpers import ROOT
from clusters import bare_metal, history, write
from servers import alertmanager, alerts, power_state, prometheus, redfish, wait_power

from rackform.reap.audit import AuditLog, cluster_lock

USER, PASSWORD = "admin", "s3cret-bmc-pw"
SYSTEMS = ["idle-0", "idle-1", "guarded-0", "guarded-1", "busy-0", "busy-1", "creds-0", "creds-1"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reap")
    gpus = (
        history("busy", 60)
        + history("idle", 2)
        + history("stalled", 0, fb=40000)
        + [g for g in history("partial", 2) if g.node == "partial-0"]
        + history("stale", 2, end_min=30)
        + history("young", 2, start_min=30)
        + history("guarded", 2)
        + [replace(g, util=90) if g.node == "mixed-0" else g for g in history("mixed", 1)]
        + history("creds", 2)
        + history("notified", 3)
    )
    with (
        prometheus(gpus, tmp / "prom") as prom,
        redfish({s: "On" for s in SYSTEMS}, tmp / "bmc", USER, PASSWORD) as bmc,
        alertmanager(tmp / "am") as am,
    ):
        files = {}

        def bp(name, **kw):
            files[name] = write(tmp, name, bare_metal(name, bmc_url=bmc, **kw))

        power = {f"{n}-{i}": (f"{n}-{i}", "BMC_PASSWORD") for n in ("idle", "guarded", "busy") for i in range(2)}  # fmt: skip
        bp("busy", action="power-off", bmcs=power)
        bp("idle", action="power-off", bmcs=power)
        bp("stalled", action="drain")
        bp("partial")
        bp("stale")
        bp("young")
        bp("guarded", action="power-off", bmcs=power, protect=True)
        bp("mixed")
        bp("creds", action="power-off",
           bmcs={"creds-0": ("creds-0", "BMC_WRONG"), "creds-1": ("creds-1", "BMC_PASSWORD")})  # fmt: skip
        bp("notified")
        yield {"prom": prom, "bmc": bmc, "am": am, "files": files, "tmp": tmp}


def run(*args, state: Path | None = None, env: dict | None = None):
    environ = {**os.environ, "BMC_USER": USER, "BMC_PASSWORD": PASSWORD, "BMC_WRONG": "nope"}
    environ.pop("RACKFORM_REAP_DIR", None)
    environ.update(env or {})
    cmd = [sys.executable, "-m", "rackform", "reap", *map(str, args)]
    if state is not None:
        cmd += ["--state-dir", str(state)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=environ, timeout=120)


def decisions(result) -> dict[str, dict]:
    assert result.stdout, result.stderr
    return {d["cluster"]: d for d in json.loads(result.stdout)["clusters"]}


def test_dry_run_measures_every_cluster_and_does_nothing(world, tmp_path):
    files = world["files"]
    r = run(*files.values(), "--prometheus", world["prom"], "--json", state=tmp_path)
    assert r.returncode == 0, r.stderr
    got = decisions(r)

    idle = got["idle"]
    assert (idle["verdict"], idle["action"], idle["outcome"]) == ("idle", "power-off", "dry-run")
    assert idle["gpus_reporting"] == idle["gpus_expected"] == 4
    assert idle["util_avg"] == pytest.approx(2)
    # The money: 4 idle GPUs for the 60-minute window at the catalog's amortized price.
    assert idle["idle_gpu_hours"] == pytest.approx(4.0)
    assert idle["usd_per_gpu_hour"] > 0
    assert idle["idle_usd"] == pytest.approx(4.0 * idle["usd_per_gpu_hour"], abs=0.01)

    assert got["busy"]["verdict"] == "busy" and got["busy"]["action"] is None
    assert got["stalled"]["verdict"] == "stalled" and got["stalled"]["action"] is None
    assert any("stalled is report" in r for r in got["stalled"]["reasons"])

    partial = got["partial"]
    assert partial["verdict"] == "unknown" and partial["action"] is None
    assert partial["gpus_reporting"] == 2
    assert any("partial-1" in r for r in partial["reasons"])

    assert got["stale"]["verdict"] == "unknown"
    assert any("stale" in r and "stale-0" in r for r in got["stale"]["reasons"])
    assert got["young"]["verdict"] == "young" and got["young"]["action"] is None
    assert got["guarded"]["verdict"] == "protected" and got["guarded"]["measured"] == "idle"

    mixed = got["mixed"]
    assert mixed["verdict"] == "busy"
    nodes = {n["name"]: n["state"] for n in mixed["nodes"]}
    assert nodes == {"mixed-0": "busy", "mixed-1": "idle"}  # one idle node of a busy cluster
    assert any("mixed-1" in r for r in mixed["reasons"])

    # A dry run touches nothing: every BMC still on, nothing logged.
    for system in SYSTEMS:
        assert power_state(world["bmc"], system, USER, PASSWORD) == "On"
    assert not (tmp_path / "audit.jsonl").exists()


def test_text_output_says_what_it_measured_and_would_do(world, tmp_path):
    r = run(world["files"]["idle"], "--prometheus", world["prom"], state=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "idle - 2.0% avg over 60m, 4/4 GPUs, 4 idle GPU-hours ($" in r.stdout
    assert "would power-off (dry run; --apply acts)" in r.stdout
    assert "node idle-0: idle 2.0% (2 GPUs)" in r.stdout


def test_apply_powers_off_the_idle_cluster_only_and_never_twice(world, tmp_path):
    f = world["files"]
    r = run(f["idle"], f["busy"], f["guarded"], "--prometheus", world["prom"], "--apply",
            "--json", state=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = decisions(r)
    assert got["idle"]["outcome"] == "done"
    assert [x["ok"] for x in got["idle"]["results"]] == [True, True]
    for system in ("idle-0", "idle-1"):
        assert wait_power(world["bmc"], system, "Off", USER, PASSWORD) == "Off"
    for system in ("busy-0", "busy-1", "guarded-0", "guarded-1"):
        assert power_state(world["bmc"], system, USER, PASSWORD) == "On"
    assert PASSWORD not in r.stdout + r.stderr

    log = (tmp_path / "audit.jsonl").read_text()
    assert PASSWORD not in log
    entries = [json.loads(line) for line in log.splitlines()]
    states = [(e["cluster"], e["event"], e.get("state")) for e in entries]
    assert ("idle", "action", "started") in states and ("idle", "action", "done") in states
    assert ("busy", "decision", None) in states and ("guarded", "decision", None) in states

    again = run(f["idle"], "--prometheus", world["prom"], "--apply", "--json", state=tmp_path)
    assert again.returncode == 0, again.stderr
    d = decisions(again)["idle"]
    assert (d["verdict"], d["outcome"]) == ("acted", "skipped")
    after = (tmp_path / "audit.jsonl").read_text()
    assert after.startswith(log)  # appended, never rewritten


def test_a_bmc_refusing_the_credentials_fails_that_host_only(world, tmp_path):
    r = run(world["files"]["creds"], "--prometheus", world["prom"], "--apply", "--json",
            state=tmp_path)  # fmt: skip
    assert r.returncode == 4, r.stderr
    d = decisions(r)["creds"]
    assert d["outcome"] == "partial"
    results = {x["subject"]: x for x in d["results"]}
    assert not results["creds-0"]["ok"]
    assert "refused the credentials (HTTP 401)" in results["creds-0"]["detail"]
    assert results["creds-1"]["ok"]
    assert wait_power(world["bmc"], "creds-1", "Off", USER, PASSWORD) == "Off"
    assert power_state(world["bmc"], "creds-0", USER, PASSWORD) == "On"
    last = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    assert last["state"] == "partial" and "nope" not in json.dumps(last)


def test_notify_posts_the_measurement_to_alertmanager(world, tmp_path):
    r = run(world["files"]["notified"], "--prometheus", world["prom"], "--apply",
            "--alertmanager", world["am"], "--json", state=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert decisions(r)["notified"]["outcome"] == "done"
    got = [a for a in alerts(world["am"]) if a["labels"].get("cluster") == "notified"]
    assert len(got) == 1
    assert got[0]["labels"]["alertname"] == "RackformIdleCluster"
    assert got[0]["labels"]["verdict"] == "idle"
    assert "3.0% GPU utilization over 60m" in got[0]["annotations"]["summary"]


def test_notify_without_a_destination_is_refused_before_anything(world, tmp_path):
    r = run(world["files"]["notified"], "--prometheus", world["prom"], "--apply", state=tmp_path)
    assert r.returncode == 2
    assert "--alertmanager URL or --webhook URL" in r.stderr
    assert not (tmp_path / "audit.jsonl").exists()


def test_a_cluster_another_run_holds_is_left_alone(world, tmp_path):
    with cluster_lock(tmp_path / "locks", "notified-default"):
        r = run(world["files"]["notified"], "--prometheus", world["prom"], "--apply",
                "--alertmanager", world["am"], "--json", state=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = decisions(r)["notified"]
    assert (d["verdict"], d["outcome"]) == ("locked", "skipped")
    assert "another reap run holds" in d["reasons"][-1]


def test_a_run_killed_mid_action_is_not_repeated_and_loses_no_entry(world, tmp_path):
    # What a run killed while acting leaves: its "started" entry, then a line cut short.
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.append({"run": "killed", "event": "decision", "stack": "other-default"})
    audit.append({"run": "killed", "event": "action", "state": "started",
                  "stack": "notified-default", "action": "notify", "cluster": "notified"})  # fmt: skip
    with audit.path.open("ab") as f:
        f.write(b'{"run": "killed", "event": "act')
    before = audit.path.read_bytes()
    r = run(world["files"]["notified"], "--prometheus", world["prom"], "--apply",
            "--alertmanager", world["am"], "--json", state=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = decisions(r)["notified"]
    assert (d["verdict"], d["outcome"]) == ("acted", "skipped")
    assert "run killed already began notify" in d["reasons"][-1]
    after = audit.path.read_bytes()
    assert after.startswith(before)
    entries = list(audit.entries())
    assert [e["run"] for e in entries[:2]] == ["killed", "killed"]
    assert entries[-1]["verdict"] == "acted"  # the new entry is whole, after the cut line
