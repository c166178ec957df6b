"""`rackform reap` on a cluster that declares Slurm, end to end: Prometheus (real, on loopback)
says every GPU has been idle for hours; the cluster's controller is the local Slurm
(tests/slurm_local.py), reached through the ssh seam (tests/fake_ssh.py runs the controller's
commands here). A running or pending job keeps the cluster whatever the metrics say, an
unreadable queue is unknown (exit 5), the dry run says what --apply does, and drain goes through
scontrol, leaving the running job alone."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import time

import fake_ssh
import pytest
from blueprint_helpers import ROOT
from clusters import history
from loopback import http_server
from servers import prometheus
from slurm_local import NODES, PARTITIONS, blueprint, ssh_env

from rackform.lifecycle.audit import AuditLog
from rackform.lifecycle.lease import controller_lock
from rackform.scheduler.remote import Local


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with prometheus(history("slurm-a", 2), tmp_path_factory.mktemp("prom"), time.time()) as url:
        yield url


@pytest.fixture
def files(tmp_path):
    out = {}
    kinds = {"drain": blueprint(), "graced": blueprint(grace=30), "notify": blueprint("notify")}
    for name, text in kinds.items():
        out[name] = tmp_path / f"{name}.yaml"
        out[name].write_text(text)
    return out


def reap(prom, bp, env, state, *extra):
    r = subprocess.run(
        [sys.executable, "-m", "rackform", "reap", str(bp), "--prometheus", prom, "--json",
         "--state-dir", str(state), *extra],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=180,
    )  # fmt: skip
    assert r.stdout, r.stderr
    doc = json.loads(r.stdout)
    [d] = doc["clusters"]
    return r.returncode, d


def same_decision(a: dict, b: dict) -> None:
    """What the dry run said is what --apply found."""
    keys = ("verdict", "measured", "action", "step", "jobs")
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert a["reasons"] == b["reasons"]


def test_a_running_job_keeps_a_cluster_whose_gpus_are_idle(prom, files, slurm, tmp_path):
    job = slurm.sbatch("-A", "ml", "-w", NODES[0], "--wrap", "sleep 120")
    slurm.wait_state(job, "RUNNING")
    env = ssh_env(slurm, tmp_path)
    code, dry = reap(prom, files["drain"], env, tmp_path / "s1")
    assert code == 0
    assert (dry["measured"], dry["verdict"], dry["action"]) == ("idle", "busy", None)
    assert dry["jobs"] == [{"id": job, "state": "RUNNING", "user": slurm.user, "account": "ml",
                            "partition": PARTITIONS[0], "nodes": NODES[0], "reason": "None"}]  # fmt: skip
    assert any("a cluster with jobs is never idle" in r for r in dry["reasons"])
    assert f"job {job} ({slurm.user}, account ml, partition {PARTITIONS[0]}): RUNNING on " \
           f"{NODES[0]}" in dry["reasons"]  # fmt: skip
    code, applied = reap(prom, files["drain"], env, tmp_path / "s2", "--apply")
    assert code == 0 and applied["outcome"] == "none"
    same_decision(dry, applied)
    assert slurm.state(job) == "RUNNING"
    assert "drain" not in "".join(slurm.node_states().values())
    # Three calls on the controller per run, as the plan's ssh user on its port: the stack's
    # lock there (the one heal and rolling changes take), the nodes' Slurm state (drained
    # already?) and the queue, each once.
    calls = fake_ssh.calls(tmp_path / "ssh.log")
    assert len(calls) == 6
    assert all((c.user, c.host, c.port) == ("root", "10.77.7.1", "2222") for c in calls)
    assert sum("flock" in " ".join(c.remote) for c in calls) == 2


def test_a_pending_job_alone_keeps_it_too(prom, files, slurm, tmp_path):
    job = slurm.sbatch("--hold", "-p", PARTITIONS[1], "--wrap", "true")
    code, d = reap(prom, files["drain"], ssh_env(slurm, tmp_path), tmp_path / "s")
    assert code == 0 and d["verdict"] == "busy"
    assert [(j["id"], j["state"], j["partition"]) for j in d["jobs"]] == [
        (job, "PENDING", PARTITIONS[1])
    ]
    assert any("PENDING (JobHeldUser)" in r for r in d["reasons"])


def test_an_empty_queue_lets_it_drain_through_slurm(prom, files, slurm, tmp_path):
    env = ssh_env(slurm, tmp_path)
    code, dry = reap(prom, files["drain"], env, tmp_path / "s")
    assert code == 0
    assert (dry["verdict"], dry["action"], dry["step"], dry["outcome"]) == (
        "idle", "drain", "act", "dry-run"
    )  # fmt: skip
    assert "Slurm: no job running or pending" in dry["reasons"]
    assert set(slurm.node_states().values()) == {"idle"}  # the dry run touched nothing

    code, applied = reap(prom, files["drain"], env, tmp_path / "s", "--apply")
    assert code == 0, applied
    assert applied["outcome"] == "done"
    assert [(r["subject"], r["ok"], r["detail"]) for r in applied["results"]] == [
        (n, True, "drained in Slurm") for n in NODES
    ]
    assert slurm.node_states() == {n: "drained" for n in NODES}
    why = slurm.run("sinfo", "-h", "-N", "-o", "%E").stdout.split("\n")[0]
    assert why == "rackform reap: slurm-a/default idle"

    # Another reaper, with its own state directory: already drained, nothing sent again.
    code, again = reap(prom, files["drain"], env, tmp_path / "other", "--apply")
    assert code == 0
    assert again["verdict"] == "off" and "every node drained in Slurm (2)" in again["reasons"][-1]


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        # drain reads the nodes' Slurm state first (already drained?), then the queue
        ("drain", "cannot read Slurm's node states: sinfo failed on root@10.77.7.1:2222: "
                  "slurm_load_partitions: Unable to contact slurm controller"),
        ("notify", "cannot read the Slurm queue: squeue failed on root@10.77.7.1:2222: "
                   "slurm_load_jobs error: Unable to contact slurm controller"),
    ],
)  # fmt: skip
def test_slurmctld_down_is_unknown_and_exit_5_dry_run_and_apply_alike(
    prom, files, slurm, tmp_path, kind, why
):
    env = ssh_env(slurm, tmp_path)
    hook = ("--apply", "--webhook", "http://127.0.0.1:9/never-called")
    with slurm.controller_down():
        code, dry = reap(prom, files[kind], env, tmp_path / "s")
        code2, applied = reap(prom, files[kind], env, tmp_path / "s", *hook)
    assert code == code2 == 5
    same_decision(dry, applied)
    assert (dry["measured"], dry["verdict"], dry["read_failed"]) == ("idle", "unknown", True)
    assert any(why in r for r in dry["reasons"]), dry["reasons"]
    assert applied["outcome"] == "none" and set(slurm.node_states().values()) == {"idle"}


def test_an_unreachable_controller_is_unknown_and_exit_5(prom, files, slurm, tmp_path):
    code, d = reap(prom, files["drain"], ssh_env(slurm, tmp_path, fail=True), tmp_path / "s")
    assert code == 5 and d["verdict"] == "unknown"
    assert any("root@10.77.7.1:2222 is not reachable over SSH" in r for r in d["reasons"])


def test_a_job_during_the_grace_period_withdraws_the_warning(prom, files, slurm, tmp_path):
    posted: list[dict] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    env, state = ssh_env(slurm, tmp_path), tmp_path / "s"
    with http_server(Hook) as port:
        hook = ("--apply", "--webhook", f"http://127.0.0.1:{port}/hook")
        code, first = reap(prom, files["graced"], env, state, *hook)
        assert (code, first["step"], first["outcome"]) == (0, "warn", "warned")
        job = slurm.sbatch("--hold", "--wrap", "true")
        code, second = reap(prom, files["graced"], env, state, *hook)
    assert code == 0 and (second["verdict"], second["step"]) == ("busy", "withdraw")
    assert any("is withdrawn" in r for r in second["reasons"]) and second["jobs"][0]["id"] == job
    events = [e["event"] for e in AuditLog(state / "audit.jsonl").entries()]
    assert events == ["warn", "withdrawn"]
    assert AuditLog(state / "audit.jsonl").warning("slurm-a-default", "drain") is None
    assert len(posted) == 1  # the warning; withdrawing it sends nothing


def test_a_cluster_a_rollout_or_heal_holds_is_not_idle(prom, files, slurm, tmp_path):
    """Idle GPUs while a rolling change is stopped, or while heal remediates a node, are
    maintenance, not idleness: reap holds the cluster busy and drains nothing."""
    from rackform.lifecycle.record import Store, new_record

    rollouts = tmp_path / "rollouts"
    env = {**ssh_env(slurm, tmp_path), "RACKFORM_ROLLOUT_DIR": str(rollouts)}
    rec = new_record("slurm-a-default", "sha256:" + "ab" * 32, "drain", [[NODES[0]], [NODES[1]]],
                     {}, {})  # fmt: skip
    rec.status = "stopped"
    Store(rollouts, "slurm-a-default").write(rec)
    code, d = reap(prom, files["drain"], env, tmp_path / "s", "--apply")
    assert code == 0 and (d["measured"], d["verdict"], d["outcome"]) == ("idle", "busy", "none")
    assert any("a rolling change is stopped at batch 1 of 2" in r for r in d["reasons"]), d
    rec.status = "done"
    Store(rollouts, "slurm-a-default").write(rec)
    heal = new_record("slurm-a-default", "sha256:" + "ab" * 32, "heal", [[NODES[1]]], {}, {})
    heal.batches[0].status = "drained"
    Store(rollouts, "slurm-a-default", kind="heal").write(heal)
    code, d = reap(prom, files["drain"], env, tmp_path / "s")
    assert d["verdict"] == "busy" and any(
        f"heal is remediating {NODES[1]}" in r for r in d["reasons"]
    )
    assert set(slurm.node_states().values()) == {"idle"}


def test_a_cluster_healed_from_another_host_is_locked_never_drained(prom, files, slurm, tmp_path):
    """Heal (or a rolling change) holds the stack's lock on the controller from another host:
    reap, whose own state directory shows nothing, finds it there and leaves the idle cluster
    alone, naming the holder."""
    with controller_lock(Local(), "slurm-a-default", "heal"):  # the fake ssh's commands run here
        code, d = reap(prom, files["drain"], ssh_env(slurm, tmp_path), tmp_path / "s", "--apply")
    assert code == 5  # not decided, as for a lock held on this host
    assert d["verdict"] == "locked" and d["outcome"] == "skipped", d
    assert any("held on root@10.77.7.1:2222 by heal: pid " in r for r in d["reasons"]), d
    assert set(slurm.node_states().values()) == {"idle"}
