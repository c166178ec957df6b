"""A software change's rollout, from two revisions of a blueprint compiled by the engine: whether
it rolls, the batches (a canary first, never two racks in a batch, never more than the budget),
the nodes a node's own change reaches, and the expected time."""

from __future__ import annotations

import textwrap

import pytest

from rackform.engine import prepare_all
from rackform.rollout.changes import catalog
from rackform.rollout.plan import applied_extras, basis, batches, rollout

RACKS = {"r-a": 5, "r-b": 3, "r-c": 4}  # 12 hosts in three racks of different sizes


def blueprint(tmp_path, *, software: str = "{}", lifecycle: str = "{}", racks=RACKS, extra=""):
    hosts = []
    i = 0
    for rack, n in racks.items():
        for _ in range(n):
            i += 1
            where = f", rack: {rack}" if rack else ""
            hosts.append(f"      - {{name: gpu-node-{i:02d}, address: 10.1.0.{i}{where}}}")
    text = (
        textwrap.dedent("""\
        name: dc-train-2
        purpose: training
        owner: ops@example.com
        target: {type: bare_metal, capex_usd_per_gpu: 30000, amortize_months: 36}
        node_groups:
          - name: hgx-pool
            gpu: H100-SXM
            gpus_per_node: 8
            hosts:
        """)
        + "\n".join(hosts)
        + textwrap.dedent(f"""
        network: {{fabric: infiniband, hcas: [mlx5_0]}}
        software: {software}
        lifecycle: {lifecycle}
        """)
        + extra
    )
    path = tmp_path / "dc-train-2.yaml"
    path.write_text(text)
    (p,) = prepare_all(path)
    return basis(p.plan)


def change(tmp_path, old: dict, new: dict):
    a = blueprint(tmp_path, **old)
    b = blueprint(tmp_path, **new)
    return rollout(a, b)


def test_a_driver_branch_reboots_in_rack_batches_within_the_budget(tmp_path):
    lc = "{max_out_of_service: 3}"
    r = change(tmp_path, {"lifecycle": lc}, {"lifecycle": lc, "software": "{driver_branch: '560'}"})
    assert r.rolls and r.cls == "reboot" and r.roles == ["nvidia_driver"]
    names = [[int(n[-2:]) for n in b] for b in r.batches]
    # A canary, then rack r-a's other four in batches of 3, then r-b's three, then r-c's four.
    assert names == [[1], [2, 3, 4], [5], [6, 7, 8], [9, 10, 11], [12]]
    assert sorted(n for b in r.batches for n in b) == [f"gpu-node-{i:02d}" for i in range(1, 13)]
    order = [rack for rack, n in RACKS.items() for _ in range(n)]
    rack = {f"gpu-node-{i:02d}": r_ for i, r_ in enumerate(order, 1)}
    assert all(len({rack[n] for n in b}) == 1 for b in r.batches), "a batch spans two racks"
    assert max(map(len, r.batches)) <= 3 == r.budget
    c = catalog()
    per = c.requeue + c.converge["nvidia_driver"] + c.reboot + c.validate
    doc = r.as_json()
    assert doc["expected_minutes"] == per * 6 and doc["drain"] and doc["reboot"]
    assert doc["changes"] == [{"variable": "nvidia_driver_branch", "class": "reboot", "role": "nvidia_driver"}]  # fmt: skip


def test_the_default_budget_is_one_node_in_ten_and_no_canary_when_asked(tmp_path):
    off = "{rollout: {canary: false}}"
    r = change(tmp_path, {"lifecycle": off}, {"lifecycle": off, "software": "{nccl: 2.23.4}"})
    assert r.cls == "drain" and r.budget == 1 and not r.as_json()["reboot"]
    assert [len(b) for b in r.batches] == [1] * 12 and not r.as_json()["canary"]


def test_waiting_for_jobs_is_timed_by_its_deadline(tmp_path):
    wait = "{max_out_of_service: 4, rollout: {jobs: wait, wait_minutes: 90}}"
    r = change(tmp_path, {"lifecycle": wait}, {"lifecycle": wait, "software": "{cuda: '12.6'}"})
    c = catalog()
    converge = sum(c.converge[role] for role in ("dcgm", "nccl_rdma", "nvidia_driver"))
    assert r.roles == ["dcgm", "nccl_rdma", "nvidia_driver"]
    assert r.minutes_per_batch == 90 + converge + c.validate  # a drain, no reboot


@pytest.mark.parametrize(
    ("new", "cls", "roles"),
    [
        ({"software": "{dcgm: '3.4'}"}, "in_place", ["dcgm"]),
        ({"software": "{torch: 2.12.0}"}, "in_place", ["smoke_train"]),
        ({"extra": "validation: {smoke_steps: 50}\n"}, "none", []),
        ({"lifecycle": "{max_out_of_service: 2}"}, None, []),
    ],
)
def test_changes_that_need_no_drain_do_not_roll(tmp_path, new, cls, roles):
    r = change(tmp_path, {}, new)
    assert not r.rolls and r.batches == [] and r.expected_minutes == 0
    assert r.roles == roles
    if cls is None:
        assert r.changes == []  # a policy change alone changes no node
    else:
        assert r.cls == cls


def test_a_hosts_own_drives_roll_that_host_only(tmp_path):
    old = blueprint(tmp_path)
    text = (tmp_path / "dc-train-2.yaml").read_text()
    text = text.replace(
        "address: 10.1.0.7, rack: r-b}", "address: 10.1.0.7, rack: r-b, nvme: [S1, S2]}"
    )
    (tmp_path / "dc-train-2.yaml").write_text(text)
    (p,) = prepare_all(tmp_path / "dc-train-2.yaml")
    new = basis(p.plan)
    r = rollout(old, new)
    assert r.rolls and r.cls == "drain" and r.batches == [["gpu-node-07"]]
    assert r.as_json()["changes"][0]["nodes"] == ["gpu-node-07"]


def test_a_node_that_joins_is_not_rolled_and_one_that_leaves_is_not_waited_for(tmp_path):
    old = blueprint(tmp_path, racks={"r-a": 3})
    new = blueprint(tmp_path, racks={"r-a": 4}, software="{driver_branch: '560'}")
    r = rollout(old, new)
    assert [n for b in r.batches for n in b] == ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    shrunk = rollout(old, blueprint(tmp_path, racks={"r-a": 2}, software="{driver_branch: '560'}"))
    assert [n for b in shrunk.batches for n in b] == ["gpu-node-01", "gpu-node-02"]


def test_hosts_without_a_rack_batch_by_node_group(tmp_path):
    lc = "{max_out_of_service: 2}"
    r = change(
        tmp_path,
        {"racks": {None: 5}, "lifecycle": lc},
        {"racks": {None: 5}, "lifecycle": lc, "software": "{driver_branch: '560'}"},
    )
    assert [len(b) for b in r.batches] == [1, 2, 2]


def test_a_slurm_change_restarts_the_daemons_in_slurms_order(tmp_path):
    slurm = (
        "scheduler:\n  type: slurm\n  controller: gpu-node-01\n"
        "  partitions: [{name: batch, node_groups: [hgx-pool], default: true}]\n"
    )
    fair = slurm + "  fairness:\n    accounts: [{name: a, share: 1, users: [u]}]\n"
    r = change(tmp_path, {"extra": slurm}, {"extra": fair})
    assert not r.rolls and r.cls == "slurm"
    assert r.slurm_order == ["slurmdbd", "slurmctld", "slurmd"]


def test_batches_never_join_two_domains():
    got = batches({"r1": ["a", "b", "c"], "r2": ["d"], "r3": ["e", "f", "g", "h", "i"]}, 2, True)
    assert got == [["a"], ["b", "c"], ["d"], ["e", "f"], ["g", "h"], ["i"]]
    assert batches({}, 3, True) == []


def test_a_revalidation_runs_with_what_the_last_configuration_applied_over_the_blueprint(tmp_path):
    blueprint(tmp_path)
    (p,) = prepare_all(tmp_path / "dc-train-2.yaml")
    base = basis(p.plan).variables
    mirror = {"smoke_train_pip_find_links": ["http://mirror.example/"], "smoke_train_steps": 7}
    # As configure records it: the blueprint's variables with --extra-vars over them.
    doc = {"variables": {**base, **mirror, "nccl_rdma_fabric": base["nccl_rdma_fabric"]}}
    assert applied_extras(p.plan, doc) == mirror
    # A record from before a blueprint change: the value the nodes run is the one re-validated.
    changed = {**base, "nccl_rdma_nccl_version": "2.99.0-1"}
    assert applied_extras(p.plan, {"variables": changed}) == {"nccl_rdma_nccl_version": "2.99.0-1"}
    assert applied_extras(p.plan, None) == {}
