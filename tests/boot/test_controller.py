"""The controller's side of configuring at boot (rackform/boot/controller.py), with the real
artifacts of a bare-metal blueprint, the real boot server on loopback, and "nodes" that are the
real node script's report function posting as the listed hosts."""

from __future__ import annotations

import gzip
import json
import os
import stat
import threading

import pytest
from planhelp import AWS_TRAINING, BARE_METAL, COLOCATION, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.boot.controller import (
    BootError,
    check_bind,
    listed_groups,
    prepare,
    serve,
    write_user_data,
)
from rackform.boot.node import converge as node_converge
from rackform.boot.node import log as node_log
from rackform.boot.node import report as node_report
from rackform.boot.reports import FAILED, MISSING, PASSED
from rackform.engine import compile_effective

PASSING = [{"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8}]
FAILING = [{"name": "gpu_count", "status": "fail", "measured": 7, "expected": 8}]


@pytest.fixture(autouse=True)
def _log(tmp_path, monkeypatch):
    monkeypatch.setattr(node_log, "LOG", tmp_path / "bootstrap.log")


def _plan(tmp_path, doc):
    return compile_effective(load_effective(write_blueprint(tmp_path, doc)))


# Two node groups, names with hyphens and dots: each group its own artifact.
TWO_GROUPS = variant(
    BARE_METAL,
    **{
        "node_groups": [
            {
                **BARE_METAL["node_groups"][0],
                "hosts": [{"name": "hgx-01.r1", "address": "10.0.0.1"}],
            },
            {
                "name": "l40s",
                "gpu": "L40S",
                "gpus_per_node": 4,
                "hosts": [
                    {"name": "l40s-01.r2", "address": "10.0.0.2"},
                    {"name": "l40s-02.r2", "address": "10.0.0.3"},
                ],
            },
        ]
    },
)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_each_group_gets_its_artifact_and_each_node_its_user_data_0600(tmp_path):
    plan = _plan(tmp_path, TWO_GROUPS)
    round_ = prepare(plan, tmp_path / "out", listed_groups(plan))
    assert list(round_.nodes) == ["hgx-01.r1", "l40s-01.r2", "l40s-02.r2"]
    hgx, l40s = round_.artifacts["hgx"], round_.artifacts["l40s"]
    assert hgx.sha256 != l40s.sha256  # its own GPUs to expect, its own inventory group
    assert round_.pinned == {
        "hgx-01.r1": hgx.sha256,
        "l40s-01.r2": l40s.sha256,
        "l40s-02.r2": l40s.sha256,
    }
    assert (tmp_path / "out" / "key").read_text().strip() == round_.key.hex()
    assert _mode(tmp_path / "out" / "key") == 0o600
    written = write_user_data(round_, "http://10.0.0.254:8080")
    assert [p.name for p in written] == list(round_.nodes)
    text = written[2].read_text()
    assert _mode(written[2]) == 0o600
    assert f"http://10.0.0.254:8080/artifact/{l40s.sha256}" in text
    assert '"node": "l40s-02.r2"' in text and round_.token("l40s-02.r2") in text
    assert round_.token("l40s-01.r2") not in text and round_.key.hex() not in text


def test_no_key_or_token_goes_into_the_artifact(tmp_path):
    plan = _plan(tmp_path, BARE_METAL)
    first = prepare(plan, tmp_path / "a", listed_groups(plan))
    second = prepare(plan, tmp_path / "b", listed_groups(plan))
    assert first.key != second.key and first.token("n1") != second.token("n1")
    assert first.artifacts["hgx"].sha256 == second.artifacts["hgx"].sha256
    unpacked = gzip.decompress(first.artifacts["hgx"].path.read_bytes())
    for round_ in (first, second):
        assert round_.key.hex().encode() not in unpacked
        assert round_.token("n1").encode() not in unpacked


def test_only_listed_nodes_are_served(tmp_path):
    with pytest.raises(BootError, match="does not list its nodes"):
        listed_groups(_plan(tmp_path, AWS_TRAINING))
    plan = _plan(tmp_path, COLOCATION)
    assert [g.name for g in listed_groups(plan, "l40s")] == ["l40s"]
    with pytest.raises(BootError, match="no node group 'gpu' with listed hosts"):
        listed_groups(plan, "gpu")
    with pytest.raises(BootError, match="--url"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", "http://10.0.0.254:8080")


def test_the_round_names_each_node_passed_failed_or_missing(tmp_path):
    plan = _plan(tmp_path, TWO_GROUPS)
    round_ = prepare(plan, tmp_path / "out", listed_groups(plan))
    sent: list[bool] = []

    def nodes_boot(url, written):
        # What two of the three nodes do at the end of their bootstrap, as their user data
        # told them (the third never boots).
        def post(node, checks, outcome):
            to = {"url": url, "token": round_.token(node), "node": node}
            report = {
                "artifact": round_.pinned[node],
                "outcome": outcome,
                "error": "" if outcome == "configured" else "serving checks failed: gpu_count",
                "checks": checks,
            }
            sent.append(node_report.send_report(to, report, tries=3, backoff_s=(0.1, 0.1)))

        threading.Thread(target=post, args=("hgx-01.r1", PASSING, "configured")).start()
        threading.Thread(target=post, args=("l40s-01.r2", FAILING, "failed")).start()

    judged = serve(round_, "127.0.0.1", 0, 1.5, listening=nodes_boot, poll_s=0.1)
    assert sent == [True, True]
    assert judged.names(PASSED) == ["hgx-01.r1"]
    assert judged.names(FAILED) == ["l40s-01.r2"]
    assert judged.names(MISSING) == ["l40s-02.r2"]
    assert not judged.validated and judged.waited_s >= 1.5
    saved = json.loads((round_.reports / "hgx-01.r1.json").read_text())
    assert saved["artifact"] == round_.artifacts["hgx"].sha256


def test_a_new_round_removes_the_last_rounds_reports(tmp_path):
    plan = _plan(tmp_path, BARE_METAL)
    round_ = prepare(plan, tmp_path / "out", listed_groups(plan))
    round_.reports.mkdir()
    old = round_.reports / "n1.json"
    old.write_text("{}")
    (tmp_path / "out" / "token").write_text("an older rackform's one token for all\n")
    prepare(plan, tmp_path / "out", listed_groups(plan))
    assert not old.exists() and not (tmp_path / "out" / "token").exists()


def test_a_nodes_own_drives_and_rack_reach_it_through_its_user_data(tmp_path):
    # The artifact is its group's; what the blueprint says of one host (its NVMe drives, its
    # rack) travels in that host's user data and becomes its own inventory variables.
    doc = variant(
        BARE_METAL,
        **{"node_groups.0.hosts": [
            {"name": "n-1", "address": "10.0.0.1", "nvme": ["/dev/nvme0n1", "/dev/nvme1n1"]},
            {"name": "n-2", "address": "10.0.0.2"},
        ]},
    )  # fmt: skip
    plan = _plan(tmp_path, doc)
    round_ = prepare(plan, tmp_path / "round", listed_groups(plan))
    write_user_data(round_, "http://10.0.0.9:8080")
    own = round_.user_data_path("n-1").read_text()
    assert '"nvme_raid_devices": ["/dev/nvme0n1", "/dev/nvme1n1"]' in own
    assert "nvme_raid_devices" not in round_.user_data_path("n-2").read_text()
    spec = {"vars": {"nvme_raid_level": 0}, "group": "ng_hgx"}
    inv = node_converge.inventory(spec, host_vars=round_.host_vars["n-1"])
    host = inv["all"]["children"]["gpu_nodes"]["children"]["ng_hgx"]["hosts"]["localhost"]
    assert host["nvme_raid_devices"] == ["/dev/nvme0n1", "/dev/nvme1n1"]
    assert host["ansible_connection"] == "local"
