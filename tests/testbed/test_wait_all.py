"""`wait_all`, the loop that waits for booting or rebooting VMs, with stand-in probes (no VM:
the e2e test boots real ones)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rackform.testbed.ssh import Ssh, SshError, wait_all

CONNS = {f"node{i}": Ssh(2200 + i, Path("key"), Path("known_hosts")) for i in (1, 2, 3)}


def test_pending_vms_are_probed_at_once():
    # Each probe waits for all three at a barrier: probed one after another, none gets through.
    barrier = threading.Barrier(3, timeout=10)
    seen: list[str] = []

    def ready(name: str, ssh: Ssh) -> bool:
        barrier.wait()
        seen.append(f"{name}:{ssh.port}")
        return True

    took = wait_all(CONNS, 30, ready=ready)
    assert set(took) == set(CONNS)
    assert sorted(seen) == ["node1:2201", "node2:2202", "node3:2203"]


def test_a_ready_vm_is_not_probed_again():
    calls: dict[str, int] = {}

    def ready(name: str, _ssh: Ssh) -> bool:
        calls[name] = calls.get(name, 0) + 1
        return name != "node3" or calls[name] >= 3

    took = wait_all(CONNS, 30, ready=ready)
    assert calls == {"node1": 1, "node2": 1, "node3": 3}
    assert took["node3"] >= took["node1"]


def test_timeout_names_the_late_vms():
    with pytest.raises(SshError, match=r"^node2, node3: not back within 0 s \(see console.log"):
        wait_all(CONNS, 0, ready=lambda n, _s: n == "node1", waiting_for="not back")


def test_a_dead_qemu_fails_at_once():
    with pytest.raises(SshError, match="node2: QEMU exited while booting"):
        wait_all(CONNS, 600, alive=lambda n: n != "node2", ready=lambda _n, _s: False)
