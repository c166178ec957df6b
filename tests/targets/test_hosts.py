"""The Host dynamic provider, called as the engine would call it (create / read / diff / update /
delete), and the facts probe: parsed, run on this machine, and run through a fake `ssh`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import fake_ssh
import pytest

from rackform.targets.onprem.hosts import (
    PROBE,
    HostProvider,
    HostUnreachable,
    host_id,
    parse_facts,
    probe,
)

HOST = {
    "name": "n1",
    "address": "10.0.0.1",
    "port": 22,
    "user": "ubuntu",
    "rack": None,
    "site": None,
    "gpu": "H100-SXM",
    "gpus_per_node": 8,
    "nvme": [],
}

FACTS_TEXT = """hostname=n1
kernel=6.1.0-18-amd64
os=ubuntu 22.04
gpu_pci=0000:18:00.0|0x2330
gpu_pci=0000:2a:00.0|0x2330
gpu_name=NVIDIA H100 80GB HBM3
gpu_name=NVIDIA H100 80GB HBM3
nvme=nvme1n1|S2|3840755982336|Samsung PM1733
nvme=nvme0n1|S1|3840755982336|Samsung PM1733
"""


class Probes:
    """Host answers, in order; records every probe. Stands in for SSH to a real host."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[tuple] = []

    def __call__(self, user, address, port):
        self.calls.append((user, address, port))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_parse_facts_counts_gpus_and_orders_drives_by_serial():
    facts = parse_facts(FACTS_TEXT)
    assert facts["gpu_count"] == 2
    assert facts["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert facts["gpu_pci"] == ["0000:18:00.0", "0000:2a:00.0"]
    assert [d["serial"] for d in facts["nvme"]] == ["S1", "S2"]
    assert facts["nvme"][0]["size_gb"] == 3840.8
    assert facts["os"] == "ubuntu 22.04"


def test_parse_facts_without_driver_names_gpus_by_pci_id():
    facts = parse_facts("hostname=x\ngpu_pci=0000:18:00.0|0x2330\n")
    assert facts["gpu_count"] == 1
    assert facts["gpu_model"] == "pci 0x2330"
    assert parse_facts("hostname=x\n")["gpu_count"] == 0


def test_probe_script_runs_on_this_machine():
    out = subprocess.run(["sh", "-s"], input=PROBE, capture_output=True, text=True, check=True)
    facts = parse_facts(out.stdout)
    assert facts["hostname"] == socket.gethostname()
    assert facts["kernel"] == os.uname().release
    namespaces = sorted(
        n for n in os.listdir("/sys/block") if n.startswith("nvme") and "c" not in n[4:]
    )
    assert sorted(d["name"] for d in facts["nvme"]) == namespaces
    assert facts["gpu_count"] >= 0


@pytest.fixture
def ssh_on_path(tmp_path, monkeypatch):
    fake_ssh.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(tmp_path / "ssh.log"))
    return tmp_path / "ssh.log"


def test_probe_goes_through_ssh_in_batch_mode(ssh_on_path):
    facts = probe("ubuntu", "10.0.0.1", 2222)
    assert facts["hostname"] == socket.gethostname()
    (argv,) = [json.loads(line) for line in ssh_on_path.read_text().splitlines()]
    assert "BatchMode=yes" in argv
    assert argv[-8:] == ["-p", "2222", "-l", "ubuntu", "--", "10.0.0.1", "sh", "-s"]


def test_unreachable_host_names_the_reason(ssh_on_path, monkeypatch):
    monkeypatch.setenv("FAKE_SSH_FAIL", "1")
    with pytest.raises(HostUnreachable, match="Connection refused"):
        probe("ubuntu", "10.0.0.1", 22)
    provider = HostProvider()
    with pytest.raises(HostUnreachable, match=r"host n1: ubuntu@10.0.0.1:22 .*Connection refused"):
        provider.create(dict(HOST))


def test_create_records_facts():
    probes = Probes(parse_facts(FACTS_TEXT))
    result = HostProvider(probes).create(dict(HOST))
    assert result.id == host_id(HOST) == "n1@10.0.0.1:22"
    assert result.outs["reachable"] is True
    assert result.outs["facts"]["gpu_count"] == 2
    assert result.outs["address"] == "10.0.0.1"
    assert probes.calls == [("ubuntu", "10.0.0.1", 22)]


def test_refresh_shows_drift_and_an_unreachable_host():
    before = parse_facts(FACTS_TEXT)
    after = parse_facts(
        FACTS_TEXT.replace("gpu_pci=0000:2a:00.0|0x2330\n", "").replace(
            "gpu_name=NVIDIA H100 80GB HBM3\n", "", 1
        )
    )
    probes = Probes(before, after, HostUnreachable("gone"))
    provider = HostProvider(probes)
    state = provider.create(dict(HOST)).outs
    refreshed = provider.read("n1@10.0.0.1:22", state)
    assert refreshed.outs["facts"]["gpu_count"] == 1  # a GPU fell off the bus: drift
    gone = provider.read("n1@10.0.0.1:22", refreshed.outs)
    assert gone.outs["reachable"] is False
    assert gone.outs["facts"]["gpu_count"] == 1  # the last facts known stay


def test_diff_replaces_on_a_new_address_and_updates_on_new_expectations():
    provider = HostProvider(Probes())
    olds = {**HOST, "facts": {}, "reachable": True}
    same = provider.diff("id", olds, dict(HOST))
    assert not same.changes
    moved = provider.diff("id", olds, {**HOST, "address": "10.0.0.9"})
    assert moved.changes and moved.replaces == ["address"]
    assert moved.delete_before_replace
    regpu = provider.diff("id", olds, {**HOST, "gpus_per_node": 4})
    assert regpu.changes and regpu.replaces == []


def test_update_probes_again():
    probes = Probes(parse_facts(FACTS_TEXT))
    out = HostProvider(probes).update("id", dict(HOST), {**HOST, "rack": "r9"})
    assert out.outs["rack"] == "r9" and out.outs["facts"]["gpu_count"] == 2


def test_delete_releases_without_touching_the_host(ssh_on_path):
    probes = Probes()
    assert HostProvider(probes).delete("n1@10.0.0.1:22", {**HOST, "facts": {}}) is None
    assert probes.calls == []
    assert HostProvider().delete("n1@10.0.0.1:22", dict(HOST)) is None
    assert not Path(ssh_on_path).exists()  # ssh never ran


def test_host_declares_its_outputs_to_type_checkers_only():
    # The SDK reads a resource class's annotations for every resource it registers
    # (typing.get_type_hints): Host has none at run time (the port's reader makes it an int).
    from rackform.targets.onprem.hosts import Host

    assert not vars(Host).get("__annotations__")
