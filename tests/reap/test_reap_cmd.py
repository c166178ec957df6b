"""`rackform reap` end to end against real servers on 127.0.0.1: Prometheus over three hours of
backfilled dcgm-exporter history, sushy-tools' Redfish emulator as the hosts' BMCs, and
Alertmanager for warnings, notify and silences. Every cluster name has a hyphen, as the
schema allows and `rackform init` writes. Each scenario is one a reaper has been fooled by: a
job started minutes ago, a bursty evaluation, a gap, a relabelled series, a hung job with a
probe blip, an NCCL hang at 100%, a stale exporter, a young cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from blueprint_helpers import ROOT
from clusters import bare_metal, history, write
from servers import alertmanager, alerts, power_state, prometheus, redfish, wait_power

from rackform.lifecycle.audit import AuditLog
from rackform.reap.run import reap_lock

USER, PASSWORD = "admin", "s3cret-bmc-pw"
POWERED = ["llm-idle", "llm-guarded", "llm-busy", "grace-wait", "grace-burst", "job-8min",
           "hung-probe", "llm-off"]  # fmt: skip
SYSTEMS = [f"{n}-{i}" for n in POWERED for i in range(2)] + ["creds-a-0", "creds-a-1"]


def job_started(minutes_ago: int, util: float):
    return lambda i: util if i < minutes_ago else 2.0


def hourly_eval(i: int) -> float:
    return 100.0 if i % 60 < 5 else 1.0  # 5 minutes at 100% every hour, one running now


def probe_blips(i: int) -> float:
    return 2.0 if i % 20 == 0 else 0.0


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reap")
    now = time.time()
    hung_since = now - 3 * 3600
    gpus = (
        history("llm-busy", 60)
        + history("llm-idle", 2)
        + history("llm-stalled", 0, fb=40000)
        + [g for g in history("part-ial", 2) if g.node == "part-ial-0"]
        + history("stale-exp", 2, end_min=30)
        + history("young-one", 2, start_min=30)
        + history("llm-guarded", 2)
        + [replace(g, util=90) if g.node == "mixed-a-0" else g for g in history("mixed-a", 1)]
        + history("creds-a", 2)
        + history("notified-a", 3)
        + history("job-8min", job_started(8, 98))
        + history("eval-hourly", hourly_eval)
        # The exporter was down from 100 to 15 minutes ago while a job ran.
        + history("gap-mid", 100, end_min=100)
        + history("gap-mid", 100, start_min=15)
        # Re-addressed 30 minutes ago: the old series idle, the new one at 100% since.
        + history("re-label", 0, start_min=180, end_min=31, extra=(("instance", "10.0.0.1:9400"),))
        + history("re-label", 100, start_min=30, extra=(("instance", "10.0.0.9:9400"),))
        + history("hung-probe", probe_blips, fb=61000)
        + history("nccl-hang", 100, fb=61000, heartbeat=lambda i, end: hung_since)
        + history("nccl-ok", 100, fb=61000, heartbeat=lambda i, end: end - i * 60)
        + history("grace-wait", 2)
        + history("grace-burst", lambda i: 100.0 if 70 <= i <= 75 else 2.0)
        + history("llm-off", 2)
        + history("snoozy", 2)
        + history("llm-train-a", 2, environment="dev-us")
    )
    with (
        prometheus(gpus, tmp / "prom", now) as prom,
        redfish(
            {s: "On" for s in SYSTEMS} | {"llm-off-0": "Off", "llm-off-1": "Off"},
            tmp / "bmc",
            USER,
            PASSWORD,
        ) as bmc,  # fmt: skip
        alertmanager(tmp / "am") as am,
    ):
        files = {}

        def bp(name, **kw):
            files[name] = write(tmp, name, bare_metal(name, bmc_url=bmc, **kw))

        def power(name, env="BMC_PASSWORD"):
            return {f"{name}-{i}": (f"{name}-{i}", env) for i in range(2)}

        for name in ("llm-busy", "llm-idle", "job-8min", "llm-off"):
            bp(name, action="power-off", bmcs=power(name))
        bp("llm-stalled", action="drain")
        bp("part-ial")
        bp("stale-exp")
        bp("young-one")
        bp("llm-guarded", action="power-off", bmcs=power("llm-guarded"), protect=True)
        bp("mixed-a")
        bp("creds-a", action="power-off",
           bmcs={"creds-a-0": ("creds-a-0", "BMC_WRONG"), "creds-a-1": ("creds-a-1", "BMC_PASSWORD")})  # fmt: skip
        bp("notified-a")
        bp("eval-hourly")
        bp("gap-mid")
        bp("re-label")
        bp("hung-probe", action="power-off", bmcs=power("hung-probe"))
        bp("nccl-hang")
        bp("nccl-ok")
        bp("grace-wait", action="power-off", bmcs=power("grace-wait"), grace=30)
        bp("grace-burst", action="power-off", bmcs=power("grace-burst"), grace=60)
        bp("snoozy")
        bp("llm-train-a", environment="dev-us")
        yield {"prom": prom, "bmc": bmc, "am": am, "files": files, "tmp": tmp}


def run(*args, state: Path | None = None, env: dict | None = None):
    environ = {**os.environ, "BMC_USER": USER, "BMC_PASSWORD": PASSWORD, "BMC_WRONG": "nope"}
    environ.pop("RACKFORM_REAP_DIR", None)
    environ.update(env or {})
    cmd = [sys.executable, "-m", "rackform", *map(str, args)]
    if state is not None:
        cmd += ["--state-dir", str(state)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=environ, timeout=180)


def reap(world, *names, apply=False, state=None, extra=()):
    args = ["reap", *(world["files"][n] for n in names), "--prometheus", world["prom"], "--json"]
    if apply:
        args += ["--apply", "--alertmanager", world["am"]]
    return run(*args, *extra, state=state)


def decisions(result) -> dict[str, dict]:
    assert result.stdout, result.stderr
    return {d["cluster"]: d for d in json.loads(result.stdout)["clusters"]}


def test_dry_run_measures_every_cluster_and_does_nothing(world, tmp_path):
    r = reap(world, *world["files"], state=tmp_path)
    # Some clusters cannot be decided (missing data): a distinct status, with the reason.
    assert r.returncode == 5, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit"]["status"] == 5 and "part-ial [default] unknown" in doc["exit"]["reason"]
    got = decisions(r)

    idle = got["llm-idle"]
    assert (idle["verdict"], idle["action"], idle["outcome"]) == ("idle", "power-off", "dry-run")
    assert idle["step"] == "act"
    assert idle["gpus_reporting"] == idle["gpus_expected"] == 4
    assert idle["util_avg"] == pytest.approx(2)
    # The money: 4 idle GPUs for the 60-minute window at the catalog's amortized price.
    assert idle["idle_gpu_hours"] == pytest.approx(4.0)
    assert idle["idle_usd"] == pytest.approx(4.0 * idle["usd_per_gpu_hour"], abs=0.01)

    assert got["llm-busy"]["verdict"] == "busy" and got["llm-busy"]["action"] is None
    assert got["llm-stalled"]["verdict"] == "stalled" and got["llm-stalled"]["action"] is None
    assert any("stalled is report" in r for r in got["llm-stalled"]["reasons"])

    partial = got["part-ial"]
    assert partial["verdict"] == "unknown" and partial["gpus_reporting"] == 2
    assert any("part-ial-1" in r for r in partial["reasons"])
    assert got["stale-exp"]["verdict"] == "unknown"
    stale = got["stale-exp"]["reasons"]
    # Located to the bucket (two scrape intervals): the last sample was 30 minutes ago.
    assert any(re.search(r"stale-exp-0 gpu 0: no samples in the last (28|29|30) min", r)
               for r in stale), stale  # fmt: skip
    assert got["young-one"]["verdict"] == "young" and got["young-one"]["action"] is None
    assert got["llm-guarded"]["verdict"] == "protected"
    assert got["llm-guarded"]["measured"] == "idle"

    mixed = got["mixed-a"]
    assert mixed["verdict"] == "busy"
    assert {n["name"]: n["state"] for n in mixed["nodes"]} == {"mixed-a-0": "busy",
                                                              "mixed-a-1": "idle"}  # fmt: skip

    # In use, and once called idle: each is busy, stalled or unknown now.
    assert got["job-8min"]["verdict"] == "busy"  # 98% for 8 minutes after hours of idleness
    assert got["job-8min"]["util_avg"] < 20  # the average alone would have called it idle
    assert got["eval-hourly"]["verdict"] == "busy"
    gap = got["gap-mid"]
    assert gap["verdict"] == "unknown"
    assert any("gap-mid-0 gpu 0: no samples until 1" in r for r in gap["reasons"]), gap["reasons"]
    assert got["re-label"]["verdict"] == "busy"
    assert got["hung-probe"]["verdict"] == "stalled" and got["hung-probe"]["action"] is None
    assert got["nccl-hang"]["verdict"] == "stalled"
    assert got["nccl-ok"]["verdict"] == "busy"
    assert got["llm-train-a"]["verdict"] == "idle"  # a hyphenated environment, too
    assert got["llm-off"]["verdict"] == "off"  # the dry run reads live power state

    # A dry run touches nothing: every BMC as it was, nothing logged.
    for system in SYSTEMS:
        want = "Off" if system.startswith("llm-off") else "On"
        assert power_state(world["bmc"], system, USER, PASSWORD) == want
    assert not (tmp_path / "audit.jsonl").exists()


def test_text_output_says_what_it_measured_and_would_do(world, tmp_path):
    r = run("reap", world["files"]["llm-idle"], "--prometheus", world["prom"], state=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "idle - 2.0% avg over 60m, 4/4 GPUs, 4 idle GPU-hours ($" in r.stdout
    assert "would power-off (dry run; --apply acts)" in r.stdout
    assert "node llm-idle-0: idle 2.0% (2 GPUs)" in r.stdout


def test_apply_powers_off_the_idle_cluster_only_confirms_it_and_silences_its_alerts(
    world, tmp_path
):
    f = ["llm-idle", "llm-busy", "llm-guarded", "job-8min", "hung-probe"]
    r = reap(world, *f, apply=True, state=tmp_path)
    assert r.returncode == 0, r.stderr
    got = decisions(r)
    assert got["llm-idle"]["outcome"] == "done"
    results = got["llm-idle"]["results"]
    assert [x["ok"] for x in results] == [True, True, True]
    assert all("confirmed Off" in x["detail"] for x in results[:2])
    assert results[2]["subject"].endswith("/api/v2/silences")
    for system in ("llm-idle-0", "llm-idle-1"):
        assert power_state(world["bmc"], system, USER, PASSWORD) == "Off"
    # Busy, protected, a job 8 minutes old, a hung job with probe blips: still on.
    for name in ("llm-busy", "llm-guarded", "job-8min", "hung-probe"):
        for i in range(2):
            assert power_state(world["bmc"], f"{name}-{i}", USER, PASSWORD) == "On", name
    assert PASSWORD not in r.stdout + r.stderr
    log = (tmp_path / "audit.jsonl").read_text()
    assert PASSWORD not in log
    states = [(e["cluster"], e["event"], e.get("state")) for e in map(json.loads, log.splitlines())]
    assert ("llm-idle", "action", "started") in states and ("llm-idle", "action", "done") in states

    # The exporters of a powered-off cluster are down on purpose: silenced, nobody paged.
    with __import__("urllib.request").request.urlopen(f"{world['am']}/api/v2/silences") as s:
        silences = json.load(s)
    ours = [x for x in silences if {"name": "cluster", "value": "llm-idle", "isRegex": False,
                                    "isEqual": True} in x["matchers"]]  # fmt: skip
    assert ours and ours[0]["status"]["state"] == "active"

    # The same reaper again: the audit log says it began; another reaper (its own state
    # directory) reads the live power state and finds it already off. Neither acts.
    again = decisions(reap(world, "llm-idle", apply=True, state=tmp_path))["llm-idle"]
    assert (again["verdict"], again["outcome"]) == ("acted", "none")
    other = reap(world, "llm-idle", apply=True, state=tmp_path / "other")
    assert other.returncode == 0, other.stderr
    d = decisions(other)["llm-idle"]
    assert (d["verdict"], d["outcome"]) == ("off", "none")
    assert "already off: every host Off" in d["reasons"][-1]


def test_a_bmc_refusing_the_credentials_fails_that_host_only(world, tmp_path):
    r = reap(world, "creds-a", apply=True, state=tmp_path)
    # Its live power state cannot be read with the wrong password: nothing is done at all.
    assert r.returncode == 5, r.stderr
    d = decisions(r)["creds-a"]
    assert (d["verdict"], d["outcome"]) == ("unknown", "none")
    assert "refused the credentials (HTTP 401)" in d["reasons"][-1]
    assert "nope" not in r.stdout
    for system in ("creds-a-0", "creds-a-1"):
        assert power_state(world["bmc"], system, USER, PASSWORD) == "On"


def test_warn_then_act_after_the_grace_period(world, tmp_path):
    first = reap(world, "grace-wait", apply=True, state=tmp_path)
    assert first.returncode == 0, first.stderr
    d = decisions(first)["grace-wait"]
    assert (d["step"], d["outcome"]) == ("warn", "warned")
    warned = [a for a in alerts(world["am"]) if a["labels"].get("cluster") == "grace-wait"]
    assert warned and warned[0]["labels"]["alertname"] == "RackformIdleClusterWarning"
    assert power_state(world["bmc"], "grace-wait-0", USER, PASSWORD) == "On"

    # Within the grace period: nothing, and the report says when it will act.
    d = decisions(reap(world, "grace-wait", apply=True, state=tmp_path))["grace-wait"]
    assert (d["step"], d["outcome"]) == (None, "none")
    assert d["grace"]["acts_after"] and "if it stays idle" in d["reasons"][-1]

    # The warning as a run 40 minutes ago wrote it: now it acts, the stretch since measured.
    _age_warning(tmp_path, "grace-wait-default", 40 * 60)
    dry = decisions(reap(world, "grace-wait", state=tmp_path))["grace-wait"]
    assert (dry["step"], dry["outcome"]) == ("act", "dry-run")  # the dry run says so first
    d = decisions(reap(world, "grace-wait", apply=True, state=tmp_path))["grace-wait"]
    assert (d["step"], d["outcome"]) == ("act", "done"), d["reasons"]
    assert "idle for all 101 min" in d["reasons"][-1]
    assert wait_power(world["bmc"], "grace-wait-0", "Off", USER, PASSWORD) == "Off"


def test_activity_after_the_warning_withdraws_it(world, tmp_path):
    # Idle now for the whole window, but a job ran 70-75 minutes ago, after the warning.
    AuditLog(tmp_path / "audit.jsonl").append(
        {"run": "earlier", "event": "warn", "state": "sent", "stack": "grace-burst-default",
         "action": "power-off", "cluster": "grace-burst"})  # fmt: skip
    _age_warning(tmp_path, "grace-burst-default", 90 * 60)
    r = reap(world, "grace-burst", apply=True, state=tmp_path)
    assert r.returncode == 0, r.stderr
    d = decisions(r)["grace-burst"]
    assert d["measured"] == "idle" and d["step"] == "withdraw"
    assert "activity since the warning" in d["reasons"][-1]
    assert power_state(world["bmc"], "grace-burst-0", USER, PASSWORD) == "On"
    # Withdrawn: the next run warns again rather than act.
    d = decisions(reap(world, "grace-burst", state=tmp_path))["grace-burst"]
    assert d["step"] == "warn"


def _age_warning(state: Path, stack: str, seconds: float) -> None:
    """Rewrite the stack's warning entries as written `seconds` ago (a test's time machine)."""
    path = state / "audit.jsonl"
    entries = [json.loads(x) for x in path.read_text().splitlines()]
    for e in entries:
        if e.get("stack") == stack and e.get("event") == "warn":
            e["ts"] = time.time() - seconds
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))


def test_a_snooze_shows_in_every_report_and_holds_every_action(world, tmp_path):
    f = world["files"]["snoozy"]
    s = run("snooze", f, "--for", "2h", "--reason", "benchmark tonight", state=tmp_path)
    assert s.returncode == 0, s.stderr
    assert "snoozed until" in s.stdout
    for apply in (False, True):
        d = decisions(reap(world, "snoozy", apply=apply, state=tmp_path))["snoozy"]
        assert d["verdict"] == "snoozed" and d["measured"] == "idle" and d["action"] is None
        assert "benchmark tonight" in d["reasons"][-1]
    assert run("snooze", f, "--clear", state=tmp_path).returncode == 0
    d = decisions(reap(world, "snoozy", state=tmp_path))["snoozy"]
    assert d["verdict"] == "idle"


def test_snooze_refuses_what_it_cannot_mean(world, tmp_path):
    f = world["files"]["snoozy"]
    for args, why in ((["--for", "2h"], "--reason is required"),
                      (["--for", "soon", "--reason", "x"], "give a duration"),
                      (["--for", "90d", "--reason", "x"], "at most 30d"),
                      ([], "either --for")):  # fmt: skip
        r = run("snooze", f, *args, state=tmp_path)
        assert r.returncode == 2 and why in r.stderr, r.stderr
    assert not (tmp_path / "snoozes.json").exists()


def test_notify_posts_the_measurement_to_alertmanager(world, tmp_path):
    r = reap(world, "notified-a", apply=True, state=tmp_path)
    assert r.returncode == 0, r.stderr
    assert decisions(r)["notified-a"]["outcome"] == "done"
    got = [a for a in alerts(world["am"]) if a["labels"].get("cluster") == "notified-a"]
    assert len(got) == 1
    assert got[0]["labels"]["alertname"] == "RackformIdleCluster"
    assert "3.0% GPU utilization over 60m" in got[0]["annotations"]["summary"]


def test_apply_without_a_destination_is_refused_before_anything(world, tmp_path):
    for name in ("notified-a", "grace-wait"):  # notify; a warning before power-off
        r = run("reap", world["files"][name], "--prometheus", world["prom"], "--apply",
                state=tmp_path)  # fmt: skip
        assert r.returncode == 2
        assert "--alertmanager URL or --webhook URL" in r.stderr
    assert not (tmp_path / "audit.jsonl").exists()


def test_a_cluster_another_run_holds_is_left_alone_and_said_so(world, tmp_path):
    with reap_lock(tmp_path, "notified-a-default").hold():
        for apply in (False, True):
            r = reap(world, "notified-a", apply=apply, state=tmp_path)
            assert r.returncode == 5, r.stderr
            d = decisions(r)["notified-a"]
            assert d["verdict"] == "locked"
            assert "another reap run holds" in d["reasons"][-1]


def test_a_run_killed_mid_action_is_not_repeated_and_loses_no_entry(world, tmp_path):
    # What a run killed while acting leaves: its "started" entry, then a line cut short.
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.append({"run": "killed", "event": "decision", "stack": "other-default"})
    audit.append({"run": "killed", "event": "action", "state": "started",
                  "stack": "notified-a-default", "action": "notify", "cluster": "notified-a"})  # fmt: skip
    with audit.path.open("ab") as f:
        f.write(b'{"run": "killed", "event": "act')
    before = audit.path.read_bytes()
    r = reap(world, "notified-a", apply=True, state=tmp_path)
    assert r.returncode == 0, r.stderr
    d = decisions(r)["notified-a"]
    assert d["verdict"] == "acted"
    assert "run killed already began notify" in d["reasons"][-1]
    after = audit.path.read_bytes()
    assert after.startswith(before)
    entries = list(audit.entries())
    assert [e["run"] for e in entries[:2]] == ["killed", "killed"]
    assert entries[-1]["verdict"] == "acted"  # the new entry is whole, after the cut line
