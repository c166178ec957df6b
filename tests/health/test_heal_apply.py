"""heal's remediations carried out (rackform/health/apply.py) against the local Slurm
(tests/slurm_local.py) and sushy-tools' Redfish emulator: drain, requeue, remediate, re-validate,
return; a node for a person's ticket; a node that fails re-validation stays drained, and one that
failed twice is not remediated again; the budget counts nodes a person drained.

What this machine cannot have stands in here, each named: `nvidia-smi` (no GPU) is a script on
the node's PATH that records its arguments, the node's boot id is a file the test rewrites when
sushy reports the system back On (nothing reboots), and the one-node smoke job is a validator
that passes or fails as told (the roles' smoke job is the VM scenario's)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from servers import power_state, redfish
from slurm_local import NODES

from rackform.blueprint.schema.health import HealthPolicy
from rackform.blueprint.targets.onprem.host_spec import Bmc
from rackform.health.apply import apply_cluster
from rackform.health.verdict import Evidence, NodeHealth, judge_cluster
from rackform.lifecycle.maintenance import Result
from rackform.lifecycle.outcome import ActionError
from rackform.lifecycle.record import Store
from rackform.lifecycle.remedy import Remedy
from rackform.lifecycle.slurm import SlurmSteps
from rackform.scheduler.remote import Local
from rackform.targets.onprem.redfish import Redfish

STACK = "slurm-a-default"
UUID = "3f1a6b2e-0d2c-4c55-9a51-0c1f7a9e2b11"


def node(name: str, action: str, fault: str = "xid") -> NodeHealth:
    return NodeHealth(name, "gpu", True, [Evidence(fault, f"{fault} seen on {name}", action)])


def healthy(name: str) -> NodeHealth:
    return NodeHealth(name, "gpu", True, [])


class Validator:
    def __init__(self, fails: set[str] = frozenset()):
        self.fails, self.calls = set(fails), []

    def __call__(self, batch, timeout_s):
        self.calls.append(tuple(batch))
        bad = sorted(self.fails & set(batch))
        return Result(not bad, f"smoke job failed on {', '.join(bad)}" if bad else "")


@pytest.fixture
def node_bin(tmp_path):
    """A node's shell here: PATH with a recording nvidia-smi (exit 0, or as $NVSMI_RC says)."""
    bin_dir = tmp_path / "node-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/nvidia-smi.log\n'
        'if [ -n "$NVSMI_FAIL" ]; then echo "GPU 00000000:1B:00.0 is currently in use by'
        ' another process." >&2; exit 255; fi\necho "GPU 00000000:1B:00.0 was successfully reset."\n'
    )
    smi.chmod(0o755)
    return bin_dir


def run(slurm, tmp_path, nodes, node_bin, validator, budget=1, bmc=None, env=None, boot=None,
        replace=None):  # fmt: skip
    store = Store(tmp_path / "state", STACK, kind="heal")
    policy = HealthPolicy(validate_minutes=1)
    judge_cluster(nodes, policy, budget=budget)
    path = f"{node_bin}:{slurm.env['PATH']}"
    shell = Local({**slurm.env, "PATH": path, **(env or {})})

    def remedy(actions):
        return Remedy(actions, lambda n: shell, lambda n: bmc, validator, back_s=40, poll_s=0.5,
                      boot_id=f"cat {boot}\n" if boot else "cat /proc/sys/kernel/random/boot_id\n")  # fmt: skip

    steps = SlurmSteps(slurm.runner, NODES, poll_s=0.2)
    with store.lock():
        return store, apply_cluster(STACK, "sha256:" + "12" * 32, nodes, policy, budget, store,
                                    steps, remedy, out=lambda _: None, replace=replace)  # fmt: skip


def reason(slurm, n: str) -> str:
    return slurm.run("sinfo", "-h", "-N", "-n", n, "-o", "%E").stdout.strip()


def back(slurm, n: str) -> bool:
    return slurm.wait(lambda: slurm.node_states()[n] == "idle", 15)


def test_a_gpu_reset_drains_requeues_resets_validates_and_returns(slurm, tmp_path, node_bin):
    job = slurm.sbatch("--requeue", "-N1", "-w", NODES[0], "--wrap", "sleep 120")
    slurm.wait_state(job, "RUNNING")
    validator = Validator()
    store, done = run(slurm, tmp_path, [node(NODES[0], "reset"), healthy(NODES[1])],
                      node_bin, validator)  # fmt: skip
    why = "not an elastic job (no rackform-elastic mark)"
    assert [o.as_json() for o in done] == [
        {"node": NODES[0], "action": "reset", "status": "done", "why": "",
         "jobs": [{"job": job, "how": "requeued", "nodes": [], "why": why}]}
    ]  # fmt: skip
    assert (tmp_path / "nvidia-smi.log").read_text().split() == ["--gpu-reset"]
    assert validator.calls == [(NODES[0],)]  # the node alone
    assert back(slurm, NODES[0])
    assert slurm.state(job) == "PENDING"  # requeued; runs again (its node was pinned)
    steps = [e["status"] for e in store.log.entries() if e["event"] == "batch"]
    assert steps == ["drained", "applied", "validated", "done"]
    assert all(e["kind"] == "heal" for e in store.log.entries() if e["event"] == "batch")
    slurm.run("scancel", job)


def test_an_elastic_job_goes_on_without_the_node_heal_takes_and_the_report_says_so(
    slurm, tmp_path, node_bin
):
    """One srun step a node, marked as validators/elastic.py marks its job; a plain job beside
    it on the same node is requeued. The heal JSON and the audit log say which was which."""
    script = tmp_path / "per-node.sh"
    script.write_text('#!/bin/bash\nfor n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do\n'
                      '  srun -N1 -n1 -w "$n" sleep 300 &\ndone\nwait\n')  # fmt: skip
    elastic = slurm.sbatch("-N2", "--ntasks-per-node=1", "--no-kill", "--requeue",
                           "--comment=rackform-elastic:min=1", str(script))  # fmt: skip
    plain = slurm.sbatch("--requeue", "-N1", "-w", NODES[1], "--wrap", "sleep 120")
    for j in (elastic, plain):
        slurm.wait_state(j, "RUNNING")
    store, done = run(slurm, tmp_path, [healthy(NODES[0]), node(NODES[1], "reset")], node_bin,
                      Validator())  # fmt: skip
    (o,) = done
    assert o.status == "done"
    assert {j["job"]: (j["how"], j["nodes"]) for j in o.jobs} == {
        elastic: ("reduced", [NODES[0]]),
        plain: ("requeued", []),
    }
    assert f"job {elastic}: went on at reduced size on {NODES[0]}" in o.job_lines()[0]
    assert slurm.state(elastic) == "RUNNING" and slurm.state(plain) == "PENDING"
    (entry,) = [e for e in store.log.entries() if e["event"] == "jobs"]
    assert entry["nodes"] == [NODES[1]] and entry["jobs"] == o.jobs
    rec = json.loads(store.path.read_text())
    assert rec["batches"][0]["jobs"] == o.jobs  # a resumed run reports them too
    for j in (elastic, plain):
        slurm.run("scancel", j)


def test_a_drain_is_a_persons_ticket(slurm, tmp_path, node_bin):
    store, done = run(slurm, tmp_path, [node(NODES[1], "drain", "storage")], node_bin, Validator())
    assert [(o.node, o.status) for o in done] == [(NODES[1], "drained")]
    assert slurm.node_states()[NODES[1]] == "drained"
    assert reason(slurm, NODES[1]).startswith("rackform heal: storage seen on slurm-a-1")
    (ticket,) = [e for e in store.log.entries() if e["event"] == "ticket"]
    assert ticket["node"] == NODES[1] and ticket["action"] == "drain"
    assert not (tmp_path / "nvidia-smi.log").exists()


def test_a_failed_revalidation_stays_drained_and_twice_is_left_for_a_person(
    slurm, tmp_path, node_bin
):
    validator = Validator(fails={NODES[0]})
    for attempt in (1, 2):
        _, done = run(slurm, tmp_path, [node(NODES[0], "reset")], node_bin, validator)
        assert [(o.status, o.why) for o in done] == [
            ("failed", f"validation: smoke job failed on {NODES[0]}")
        ], attempt
        assert slurm.node_states()[NODES[0]] == "drained"
        slurm.run("scontrol", "update", f"nodename={NODES[0]}", "state=resume")  # a person
        assert back(slurm, NODES[0])
    _store, done = run(slurm, tmp_path, [node(NODES[0], "reset")], node_bin, validator)
    assert [(o.status, o.why[:40]) for o in done] == [
        ("drained", "reset failed 2 times in 24 h: replace or")
    ]
    assert validator.calls == [(NODES[0],)] * 2  # not a third time
    assert slurm.node_states()[NODES[0]] == "drained"


class Replacer:
    """The target's replace (AWS: tests/targets/test_aws_instances.py runs the real one against
    moto's server): records the nodes, fails where told."""

    def __init__(self, fails: str = "", state=lambda node: ""):
        self.fails, self.calls, self.state = fails, [], state

    def __call__(self, node):
        self.calls.append((node, self.state(node)))
        if self.fails:
            raise ActionError(self.fails)
        return f"i-0abc terminated, its capacity released; `rackform up --refresh` ... {node}"


def test_a_replace_drains_requeues_then_gives_the_node_up(slurm, tmp_path, node_bin):
    job = slurm.sbatch("--requeue", "-N1", "-w", NODES[1], "--wrap", "sleep 120")
    slurm.wait_state(job, "RUNNING")
    replacer, validator = Replacer(state=lambda n: slurm.node_states()[n]), Validator()
    store, done = run(slurm, tmp_path, [healthy(NODES[0]), node(NODES[1], "replace")], node_bin,
                      validator, replace=replacer)  # fmt: skip
    (o,) = done
    assert (o.node, o.status) == (NODES[1], "replaced") and o.why.startswith("i-0abc terminated")
    assert replacer.calls == [(NODES[1], "drained")]  # no job left on it when it went
    assert slurm.node_states() == {NODES[0]: "idle", NODES[1]: "drained"}
    assert reason(slurm, NODES[1]).startswith("rackform heal: replaced (xid seen on slurm-a-1")
    assert slurm.state(job) == "PENDING"  # requeued, and off the node before its machine went
    assert validator.calls == []  # the successor validates under `up`, not here
    (entry,) = [e for e in store.log.entries() if e["event"] == "replace"]
    assert (entry["node"], entry["ok"]) == (NODES[1], True)
    slurm.run("scancel", job)


@pytest.mark.parametrize("replacer", [Replacer("no running instance 'x'"), None])
def test_a_replace_that_fails_or_that_the_target_cannot_do_leaves_it_drained(
    slurm, tmp_path, node_bin, replacer
):
    store, done = run(slurm, tmp_path, [node(NODES[0], "replace")], node_bin, Validator(),
                      replace=replacer)  # fmt: skip
    (o,) = done
    assert o.status == "failed" and o.why.startswith("drained; not replaced: ")
    assert slurm.node_states()[NODES[0]] == "drained"
    (entry,) = [e for e in store.log.entries() if e["event"] == "replace"]
    assert entry["ok"] is False


def test_a_reset_the_gpu_refuses_leaves_the_node_drained(slurm, tmp_path, node_bin):
    _store, done = run(slurm, tmp_path, [node(NODES[0], "reset")], node_bin, Validator(),
                      env={"NVSMI_FAIL": "1"})  # fmt: skip
    (o,) = done
    assert o.status == "failed" and "is currently in use by another process" in o.why
    assert slurm.node_states()[NODES[0]] == "drained"


def test_a_node_a_person_drained_uses_the_budget(slurm, tmp_path, node_bin):
    slurm.run("scontrol", "update", f"nodename={NODES[1]}", "state=drain", "reason=fan")
    nodes = [node(NODES[0], "reset"), healthy(NODES[1])]
    nodes[1].out_of_service = True  # as judge() sets it from Slurm's states
    _store, done = run(slurm, tmp_path, nodes, node_bin, Validator())
    assert done == [] and "budget (1 of 2 nodes) is used" in nodes[0].waits
    assert slurm.node_states()[NODES[0]] == "idle"


def test_a_power_cycle_through_the_bmc(slurm, tmp_path, node_bin, monkeypatch):
    monkeypatch.setenv("BMC_USER", "admin")
    monkeypatch.setenv("BMC_PASS", "s3cret-pw")
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    with redfish({UUID: "On"}, tmp_path / "sushy", "admin", "s3cret-pw") as url:
        bmc = Redfish(Bmc(address=url, system=UUID, username_env="BMC_USER",
                          password_env="BMC_PASS"), tmp_path)  # fmt: skip
        seen, stop = [], threading.Event()

        def machine():
            """The host behind the BMC: powered on again after Off, it boots with a new boot
            id (never before the BMC says On: heal waits for both, and must not be done with
            the host still off)."""
            while not stop.is_set():
                try:
                    state = power_state(url, UUID, "admin", "s3cret-pw")
                except OSError:  # a slow answer on a busy machine: look again
                    continue
                if not seen or seen[-1] != state:
                    seen.append(state)
                if state == "On" and "Off" in seen:
                    boot.write_text("boot-2\n")
                time.sleep(0.2)

        t = threading.Thread(target=machine, daemon=True)
        t.start()
        try:
            store, done = run(slurm, tmp_path, [node(NODES[0], "power-cycle")], node_bin,
                              Validator(), bmc=bmc, boot=boot)  # fmt: skip
        finally:
            stop.set()
            t.join()
    assert [(o.status, o.why) for o in done] == [("done", "")]
    assert "Off" in seen and seen[-1] == "On"
    assert back(slurm, NODES[0])
    text = json.dumps(list(store.log.entries()))
    assert "s3cret-pw" not in text


def test_a_bmc_that_misses_a_poll_does_not_fail_the_power_cycle(tmp_path):
    """A BMC busy restarting its host may not answer one status poll: the wait asks again."""
    from rackform.targets.onprem.redfish import BmcError

    class Flaky:
        def __init__(self):
            self.polls = 0

        def system(self):
            return "/redfish/v1/Systems/1"

        def reset(self, system, kind):
            assert kind == "ForceRestart"

        def power_state(self, system):
            self.polls += 1
            if self.polls == 1:
                raise BmcError("BMC http://10.0.0.9 did not answer in 10 s")
            return "On"

    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    bmc = Flaky()
    shell = Local()
    r = Remedy({"n1": "power-cycle"}, lambda n: shell, lambda n: bmc, Validator(), back_s=10,
               poll_s=0.01, boot_id=f"cat {boot}\n", sleep=lambda s: boot.write_text("boot-2\n"))  # fmt: skip
    assert r.apply(["n1"], {}, False) == Result(True) and bmc.polls >= 2


def test_failures_in_the_window_come_from_the_logs_view_per_node(tmp_path):
    """How often each node's remediation failed, counted inside the window only, read from the
    audit log's incremental view as new entries arrive (other kinds and statuses not counted)."""
    from rackform.health.apply import failures
    from rackform.lifecycle.record import Store

    store = Store(tmp_path / "state", "gpu-a-prod", kind="heal")
    log = store.log
    for ts, nodes, status, kind in [
        (100, ["hgx-01"], "failed", "heal"),
        (200, ["hgx-01", "rack-2-hgx-07"], "failed", "heal"),
        (250, ["hgx-01"], "failed", "rollout"),  # a rollout's batch: not heal's
        (260, ["hgx-01"], "done", "heal"),
    ]:
        log.append({"ts": ts, "event": "batch", "kind": kind, "nodes": nodes, "status": status})
    assert failures(store, 150) == {"hgx-01": 1, "rack-2-hgx-07": 1}
    log.append(
        {"ts": 300, "event": "batch", "kind": "heal", "nodes": ["hgx-01"], "status": "failed"}
    )
    assert failures(store, 0) == {"hgx-01": 3, "rack-2-hgx-07": 1}
    assert failures(store, 301) == {}
