"""A stack made by an earlier release still refreshes and destroys under this tree.

tests/stack/previous_release/providers.json holds the dynamic resources such a stack's state
holds (its `_comment` names the commit that recorded them): each with the provider that release
pickled into it (`__provider`: its classes, and the stages' work by the names of then) and the
outputs its create wrote. Each one here goes through Pulumi's own dynamic provider server
(tests/stack/dynamic_server.py) as `pulumi refresh` (read), `pulumi up` (diff) and `pulumi
destroy` (delete) send it, so the provider is unpickled by the SDK from the recorded value and
runs the code of this tree. Only the hosts are stood in for, by the tests' fake ssh: a reachable
one runs the probe on this machine, an unreachable one refuses.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from pathlib import Path

import dynamic_server
import fake_ssh
import pulumi.dynamic.dynamic as dynamic
import pytest
from pulumi.runtime import proto

from rackform.targets.aws.access import NodeKeysProvider
from rackform.targets.aws.image_pin import ImagePinProvider
from rackform.targets.onprem.hosts import HostProvider

RECORDED = json.loads((Path(__file__).parent / "previous_release" / "providers.json").read_text())
SAME = proto.DiffResponse.DIFF_NONE
CHANGED = proto.DiffResponse.DIFF_SOME


def recorded(kind: str) -> dict:
    (found,) = [r for r in RECORDED["resources"] if r["type"].endswith(f":{kind}")]
    return found


@pytest.fixture(autouse=True)
def fresh_provider():
    """Each test unpickles the recorded providers anew, as a new `pulumi` process does."""
    dynamic_server.forget_providers()


@pytest.fixture
def ssh(tmp_path, monkeypatch) -> Path:
    """The fake ssh first on PATH; its log of every command line."""
    fake_ssh.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "ssh.log"
    log.touch()
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    return log


def hosts_reached(log: Path) -> list[str]:
    return sorted({c.host for c in fake_ssh.calls(log)})


def test_the_fixture_holds_every_dynamic_provider_and_the_stages_work_by_name():
    kinds = {r["type"] for r in RECORDED["resources"]}
    assert kinds == {
        f"pulumi-python:dynamic/rackform:{k}"
        for k in ("Host", "NodeKeys", "ImagePin", "Configure", "Validate")
    }
    for r in RECORDED["resources"]:
        assert r["outputs"]["__provider"] == r["inputs"]["__provider"]
    # What the earlier release pickled into the stages: their work named by strings.
    configure = base64.b64decode(recorded("Configure")["outputs"]["__provider"])
    assert b"rackform.push.runner:drift" in configure


@pytest.mark.parametrize(
    ("kind", "cls"),
    [("Host", HostProvider), ("NodeKeys", NodeKeysProvider), ("ImagePin", ImagePinProvider)],
)
def test_a_stack_written_now_records_the_same_providers(kind, cls):
    # The providers that hold no work of a stage pickle to the same bytes as the earlier
    # release's (the module paths their classes have in the state), so an `up` finds none of
    # them changed. Configure and Validate carry their work, whose names did change (above).
    assert dynamic.serialize_provider(cls()) == recorded(kind)["inputs"]["__provider"]


def test_a_recorded_host_refreshes_through_ssh_and_is_released_without_touching_it(
    ssh, monkeypatch
):
    host = recorded("Host")
    urn, id_, outs, ins = host["urn"], host["id"], host["outputs"], host["inputs"]
    got_id, got = dynamic_server.read(urn, id_, outs, ins)
    assert got_id == id_ == "hgx-01@10.60.0.11:22.0"
    assert got["reachable"] is True
    assert got["facts"]["hostname"] == socket.gethostname()  # the probe ran (here)
    assert {k: got[k] for k in ("name", "address", "user", "rack")} == {
        "name": "hgx-01",
        "address": "10.60.0.11",
        "user": "ubuntu",
        "rack": "r1",
    }
    assert got["__provider"] == outs["__provider"]
    (probe,) = fake_ssh.calls(ssh)
    assert (probe.user, probe.host, probe.port) == ("ubuntu", "10.60.0.11", "22")
    assert probe.config("BatchMode") == "yes" and probe.remote == ["sh", "-s"]
    # A host that stopped answering is drift to show, its recorded facts kept.
    monkeypatch.setenv("FAKE_SSH_FAIL", "1")
    _, gone = dynamic_server.read(urn, id_, outs, ins)
    assert gone["reachable"] is False and gone["facts"] == outs["facts"]
    ssh.write_text("")
    dynamic_server.delete(urn, id_, outs)
    assert ssh.read_text() == ""  # releasing runs nothing on the host
    assert dynamic_server.diff(urn, id_, outs, ins).changes == SAME
    moved = dynamic_server.diff(urn, id_, outs, {**ins, "address": "10.60.0.99"})
    assert moved.changes == CHANGED and list(moved.replaces) == ["address"]
    assert moved.deleteBeforeReplace is True


@pytest.mark.parametrize("kind", ["NodeKeys", "ImagePin"])
def test_recorded_keys_and_image_pin_read_back_as_recorded_and_delete_as_nothing(kind):
    res = recorded(kind)
    urn, id_, outs, ins = res["urn"], res["id"], res["outputs"], res["inputs"]
    got_id, got = dynamic_server.read(urn, id_, outs, ins)
    assert (got_id, got) == (id_, outs)
    dynamic_server.delete(urn, id_, outs)
    assert dynamic_server.diff(urn, id_, outs, ins).changes == SAME
    identity = "cluster" if kind == "NodeKeys" else "image"
    other = dynamic_server.diff(urn, id_, outs, {**ins, identity: "another"})
    assert other.changes == CHANGED and list(other.replaces) == [identity]


def test_a_recorded_configure_refresh_checks_every_host_through_the_roles(ssh, monkeypatch):
    # Its provider names its check-mode work by the earlier release's name: that name reaches
    # this tree's Ansible run, which goes to each host of the recorded inventory over ssh. The
    # hosts refuse, so each is drift: nobody knows what it holds.
    monkeypatch.setenv("FAKE_SSH_FAIL", "1")
    res = recorded("Configure")
    urn, id_, outs, ins = res["urn"], res["id"], res["outputs"], res["inputs"]
    got_id, got = dynamic_server.read(urn, id_, outs, ins)
    nodes = ["hgx-01", "hgx-02", "hgx-03", "hgx-04"]
    assert got_id == id_
    assert sorted(got["drift"]) == nodes
    for tasks in got["drift"].values():
        assert tasks and all("not checked" in t for t in tasks)
    assert got["content_hash"] == "drifted:" + ",".join(nodes)
    assert got["result"] == outs["result"] and got["inventory"] == outs["inventory"]
    addresses = ["10.60.0.11", "10.60.0.12", "10.60.0.13", "10.60.0.14"]
    assert hosts_reached(ssh) == addresses
    # The next `up` converges again: the refreshed hash is not the one `up` computes.
    assert dynamic_server.diff(urn, id_, got, ins).changes == CHANGED
    assert dynamic_server.diff(urn, id_, outs, ins).changes == SAME
    ssh.write_text("")
    dynamic_server.delete(urn, id_, outs)
    assert ssh.read_text() == ""  # the configuration stays on the hosts


def test_a_recorded_validation_reads_back_its_report_and_reruns_only_when_asked():
    res = recorded("Validate")
    urn, id_, outs, ins = res["urn"], res["id"], res["outputs"], res["inputs"]
    got_id, got = dynamic_server.read(urn, id_, outs, ins)
    assert (got_id, got) == (id_, outs)
    assert got["passed"] is True and got["evidence"]["payloadType"]
    dynamic_server.delete(urn, id_, outs)
    assert dynamic_server.diff(urn, id_, outs, ins).changes == SAME
    asked = dynamic_server.diff(urn, id_, outs, {**ins, "request": "2027-01-05T10:00"})
    assert asked.changes == CHANGED
