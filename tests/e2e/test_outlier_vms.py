"""End to end: a slow node named by its own measurement. Both VMs run the host checks' direct-IO
probe at once while node2's QEMU is held to about a quarter of its time from the host (stopped
and continued on a duty cycle: TCG has no CPU cap of its own); the Validate stage's merge, with
both nodes in one node group, names node2 in `node2/node_perf` and passes node1. The guest's
clock keeps running while QEMU is stopped, so the slowed VM measures itself slow, as a node
behind a noisy neighbour does. The smoke job's own figures (matmul, copies, the in-node
all-reduce) go through the same merge; importing torch costs a minute under emulation, so the
probe, which needs only the standard library, stands for them here.

Its share of the suite's budget: about 30 s."""

from __future__ import annotations

import json
import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_shared_vms import on_both, push_validators
from vms import sh

from rackform.testbed import vm
from rackform.validation.cluster import merge_reports

pytestmark = pytest.mark.slow

PROBE = (
    "cd /opt/rackform-e2e && mkdir -p /var/tmp/rackform-probe && python3 -m validators.hostcheck"
    " --node {node} --storage-dir /var/tmp/rackform-probe --storage-probe-mb 96 --json"
    " /tmp/outlier.json --no-table >/dev/null; cat /tmp/outlier.json"
)


@contextmanager
def slowed(pid: int, share: float = 0.25, period_s: float = 0.04):
    """The process running `share` of each period (SIGSTOP, SIGCONT), until the block ends; it
    is always left running. The period is short beside the probe (96 MiB, about 50 ms unslowed
    on CI's machine): with a 0.4 s period, a 48 MiB probe that fit in one running window
    measured full speed on CI and the held node passed."""
    done = threading.Event()

    def cycle() -> None:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            done.wait(period_s * (1 - share))
            os.kill(pid, signal.SIGCONT)
            done.wait(period_s * share)

    t = threading.Thread(target=cycle, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()
        os.kill(pid, signal.SIGCONT)


def test_a_node_held_back_from_the_host_is_named_by_its_own_measure(testbed, phases):
    bed = testbed
    nodes = {n.name: n for n in bed.nodes}
    pid = vm.running_pid(Path(nodes["node2"].dir))
    assert pid is not None
    on_both(lambda n: push_validators(bed, n))
    try:
        label = "outlier: both VMs probe their disks at once, node2 held to a quarter"
        with phases(label), slowed(pid):
            out = on_both(lambda n: json.loads(sh(bed, n, PROBE.format(node=n), check=False)))
        merged = merge_reports(["node1", "node2"], out, 0, {"node1": "vm", "node2": "vm"})
        perf = {c["node"]: c for c in merged["checks"] if c["name"].endswith("/node_perf")}
        probes = {n: next(c for c in r["checks"] if c["name"] == "storage_write_ceiling")
                  for n, r in out.items()}  # fmt: skip
        phases.notes.append(
            "outlier probes: " + ", ".join(f"{n} {c['measured']} GB/s" for n, c in probes.items())
        )
        assert perf["node2"]["status"] == "fail", json.dumps(perf, indent=1)
        assert "checkpoint array write" in perf["node2"]["detail"], perf["node2"]
        assert perf["node1"]["status"] == "pass", json.dumps(perf, indent=1)
    finally:
        os.kill(pid, signal.SIGCONT)
        for n in ("node1", "node2"):
            sh(
                bed,
                n,
                "rm -rf /var/tmp/rackform-probe /tmp/outlier.json /opt/rackform-e2e",
                check=False,
            )
