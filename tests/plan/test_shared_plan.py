"""The data tier in the plan: the shared_storage role's variables (which host serves the export,
the users with their groups, the mount options) and the read rate validation expects of each
node (what its GPUs consume, or the blueprint's figure)."""

from __future__ import annotations

import pytest
from planhelp import BARE_METAL, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import thaw


def compiled(tmp_path, shared: dict | None, **more):
    doc = variant(BARE_METAL, **more)
    if shared is not None:
        doc.setdefault("storage", {})["shared"] = shared
    return compile_effective(load_effective(write_blueprint(tmp_path, doc)))


SERVED = {
    "holds": ["datasets", "home"],
    "server": {"type": "nfs", "host": "n2", "export": "/srv/ml"},
}


def test_no_shared_tier_tells_the_role_so(tmp_path):
    plan = compiled(tmp_path, None)
    assert plan.group_vars["shared_storage_type"] == "none"
    assert not [
        k for k in plan.group_vars if k.startswith("shared_storage_") and k != "shared_storage_type"
    ]
    assert "--shared-mount" not in plan.expectations.host_args()


def test_a_host_of_the_blueprint_serves_the_export(tmp_path):
    shared = {
        **SERVED,
        "groups": [{"name": "ml", "gid": 4000}],
        "users": [{"name": "alice", "uid": 4001, "group": "ml"}, {"name": "ops-bot", "uid": 4002}],
    }
    v = thaw(compiled(tmp_path, shared).group_vars)
    assert (v["shared_storage_type"], v["shared_storage_server_host"]) == ("nfs", "n2")
    # No address: the role takes n2's on the fabric's first interface.
    assert v["shared_storage_address"] == "" and v["shared_storage_export"] == "/srv/ml"
    assert v["shared_storage_holds"] == ["datasets", "home"]
    assert v["shared_storage_users"] == [
        {"name": "alice", "uid": 4001, "group": "ml"},
        {"name": "ops-bot", "uid": 4002, "group": "ops-bot"},
    ]
    # A user without a group gets one of its own name, gid = uid.
    assert v["shared_storage_groups"] == [
        {"name": "ml", "gid": 4000},
        {"name": "ops-bot", "gid": 4002},
    ]


def test_an_existing_server_with_its_options(tmp_path):
    shared = {"server": {"type": "lustre", "address": "mgs.dc1.example.net", "export": "scratch",
                         "options": "flock,localflock"}}  # fmt: skip
    v = thaw(compiled(tmp_path, shared).group_vars)
    assert (
        v["shared_storage_type"] == "lustre"
        and v["shared_storage_address"] == "mgs.dc1.example.net"
    )
    assert v["shared_storage_options"] == ["flock", "localflock"]


def test_each_node_must_read_what_its_gpus_consume(tmp_path):
    w = {"model_params_b": 1, "method": "pretrain", "read_bytes_per_token": 600}
    plan = compiled(tmp_path, SERVED, workload=w)
    t = plan.expectations.shared_read_gbps
    # 8 x 989 TFLOPs x 40% / (6 x 1e9) tokens/s per node, x 600 bytes.
    assert t.value == pytest.approx(8 * 989e12 * 0.4 / 6e9 * 600 / 1e9, rel=5e-3)  # 3 figures
    assert "what one node's GPUs consume" in t.source and "600 bytes a token" in t.source
    args = plan.expectations.host_args()
    assert args[args.index("--shared-mount") + 1] == "/shared"
    assert args[args.index("--shared-read-dir") + 1] == "/shared/datasets"
    assert float(args[args.index("--shared-read-min-gbps") + 1]) == t.value


def test_a_declared_rate_wins_and_datasets_elsewhere_need_none(tmp_path):
    plan = compiled(tmp_path, SERVED, **{"validation": {"thresholds": {"shared_read_gbps": 0.5}}})
    assert plan.expectations.shared_read_gbps.value == 0.5
    home_only = compiled(tmp_path, {**SERVED, "holds": ["home"]})
    assert home_only.expectations.shared_read_gbps.value is None
    assert "--shared-read-dir" not in home_only.expectations.host_args()


def test_a_cpu_only_group_has_no_rate_to_size_and_says_so(tmp_path):
    # The testbed's hosts: no GPU, a training workload, datasets on the tier.
    doc = variant(BARE_METAL, **{"workload": {"model_params_b": 1, "method": "pretrain"}})
    for key in ("gpu", "gpus_per_node"):
        doc["node_groups"][0].pop(key)
    t = compiled(
        tmp_path, SERVED, **{"workload": doc["workload"], "node_groups": doc["node_groups"]}
    )
    t = t.expectations.shared_read_gbps
    assert t.value is None and "no training workload on GPUs" in t.source


def test_a_small_need_keeps_its_figure(tmp_path):
    # A 70B model on tokenized text needs a few kB/s a node: never rounded to nothing.
    w = {"model_params_b": 70, "method": "pretrain", "read_bytes_per_token": 2}
    t = compiled(tmp_path, SERVED, workload=w).expectations.shared_read_gbps
    assert 0 < t.value < 1e-4 and t.value == float(f"{t.value:.3g}")
