"""`rackform heal --apply`, the real command: Prometheus (real, on loopback) holds an XID whose
action is a drain on one node of a cluster whose controller is the local Slurm (reached through
the ssh seam, tests/fake_ssh.py); the node is drained through scontrol with heal's reason and the
JSON says so. A cluster heal cannot act on (no scheduler, the stack's lock held) is judged and
says why it was not acted on. Remediations that reach a node (reset, reboot, power cycle, the
re-validation) are tests/health/test_heal_apply.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fake_ssh
from blueprint_helpers import ROOT
from servers import Gpu, Series, prometheus
from slurm_local import GPUS_PER_NODE, NODES, blueprint, ssh_env

from rackform.cli.heal_apply import Access, _remedy
from rackform.engine import prepare
from rackform.lifecycle.lease import controller_lock
from rackform.lifecycle.record import Store
from rackform.scheduler.remote import Local
from rackform.targets.runtimes import cluster_inventory
from rackform.telemetry import labels as L

NAME = "slurm-a"


def text(health: str = "{}") -> str:
    return blueprint() + f"  health: {health}\n"


def series():
    gpus = [
        Gpu(NAME, "default", "training", n, g, 50.0) for n in NODES for g in range(GPUS_PER_NODE)
    ]
    ids = ((L.CLUSTER, NAME), (L.ENVIRONMENT, "default"), (L.PURPOSE, "training"),
           (L.NODE, NODES[0]), (L.GPU, "1"))  # fmt: skip
    # XID 54 (auxiliary power, CHECK_MECHANICALS: a person's) on slurm-a-0 ten minutes ago.
    xid = Series(L.XID_ERRORS, ids, lambda i, t: 54 if 8 <= i <= 12 else 0)
    return gpus, [xid]


def heal(url, bp, env, state, *extra):
    r = subprocess.run(
        [sys.executable, "-m", "rackform", "heal", str(bp), "--prometheus", url, "--json",
         "--apply", "--state-dir", str(state), *extra],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=180,
    )  # fmt: skip
    assert r.stdout, r.stderr
    return r, json.loads(r.stdout)


def test_apply_drains_the_node_for_a_person_and_leaves_the_other(slurm, tmp_path):
    bp = tmp_path / "slurm-a.yaml"
    bp.write_text(text())
    gpus, extra = series()
    with prometheus(gpus, tmp_path / "prom", series=extra) as url:
        r, doc = heal(url, bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 6, r.stderr
    assert doc["applied"] is True
    (c,) = doc["clusters"]
    (act,) = c["actions"]
    assert (act["node"], act["action"], act["status"]) == (NODES[0], "drain", "drained"), act
    assert "XID 54" in act["why"], act
    states = slurm.node_states()
    assert states[NODES[0]] == "drained" and states[NODES[1]] == "idle"
    why = slurm.run("sinfo", "-h", "-N", "-n", NODES[0], "-o", "%E").stdout.strip()
    assert why.startswith("rackform heal: GPU 1: XID 54")
    log = [
        json.loads(line)
        for line in (tmp_path / "state" / "slurm-a-default.log").read_text().splitlines()
    ]
    # The run's in-service sample first (both nodes in service as it judged), then the ticket.
    assert [e["event"] for e in log] == ["in-service", "ticket"] and log[1]["node"] == NODES[0]
    assert (log[0]["in_service"], log[0]["nodes"]) == (2, 2)


def test_a_cluster_heal_cannot_act_on_says_why(slurm, tmp_path):
    bp = tmp_path / "slurm-a.yaml"
    bp.write_text(text())
    gpus, extra = series()
    with prometheus(gpus, tmp_path / "prom", series=extra) as url:
        with Store(tmp_path / "state", "slurm-a-default").lock():
            r, doc = heal(url, bp, ssh_env(slurm, tmp_path), tmp_path / "state")
        assert "a rolling change or heal is in progress" in doc["clusters"][0]["not_acted_on"]
        assert doc["clusters"][0]["actions"] == []
        # A rolling change from another host (its own state directory) holds the lock on the
        # controller: found there.
        with controller_lock(Local(), "slurm-a-default", "rolling change"):
            r, doc = heal(url, bp, ssh_env(slurm, tmp_path), tmp_path / "state")
        held = doc["clusters"][0]["not_acted_on"]
        assert held.startswith("slurm-a-default: held on root@10.77.7.1:2222 by rolling change:")
        assert doc["clusters"][0]["actions"] == []
        no_slurm = tmp_path / "plain.yaml"
        no_slurm.write_text(text().split("scheduler:")[0] + "lifecycle:\n  health: {}\n")
        r, doc = heal(url, no_slurm, ssh_env(slurm, tmp_path), tmp_path / "state")
        assert "declares no scheduler" in doc["clusters"][0]["not_acted_on"]
    assert r.returncode == 6 and set(slurm.node_states().values()) == {"idle"}


def test_the_commands_remediation_reaches_the_node_it_names_over_ssh(tmp_path, monkeypatch):
    """The shell `heal --apply` remediates a node through (rackform/cli/heal_apply.py): that
    node's SSH, as the plan's user, with the key and known_hosts given. tests/fake_ssh.py runs
    the GPU reset here, against a recording stand-in for nvidia-smi (no GPU on this machine)."""
    bp = tmp_path / "slurm-a.yaml"
    bp.write_text(text())
    plan = prepare(bp).plan
    node_bin = tmp_path / "node-bin"
    node_bin.mkdir()
    (smi := node_bin / "nvidia-smi").write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/nvidia-smi.log\necho "GPU 0 was successfully reset."\n'
    )
    smi.chmod(0o755)
    env = fake_ssh.environ(tmp_path, {"PATH": f"{node_bin}:{os.environ['PATH']}"})
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    access = Access(private_key=tmp_path / "id", known_hosts=tmp_path / "kh")
    remedy = _remedy(plan, cluster_inventory(plan), access, lambda _: None, None)
    done = remedy({NODES[1]: "reset"}).apply([NODES[1]], {}, reboot=False)
    assert done.ok, done.why
    assert (tmp_path / "nvidia-smi.log").read_text().split() == ["--gpu-reset"]
    (argv,) = [json.loads(line) for line in (tmp_path / "ssh.log").read_text().splitlines()]
    call = fake_ssh.parse(argv)
    assert (call.user, call.host, call.port) == ("root", "10.77.7.2", "2222"), argv
    assert argv[argv.index("-i") + 1] == str(tmp_path / "id"), argv
