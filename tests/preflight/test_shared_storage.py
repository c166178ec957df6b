"""storage.shared: the data tier's schema (each mistake one located line) and its preflight, with
the numbers worked out here from the catalog's figures (H100 SXM 989 bf16 dense TFLOPs, 40% MFU,
6 FLOPs per parameter per token; FSx for Lustre capacity x MB/s per TiB)."""

from __future__ import annotations

import pytest
from blueprint_helpers import aws_text, bare_text, located_line, validate_text
from preflight_bp import aws, bare, found, load

from rackform.plan.shared import data_rate


def tokens_per_s(gpus: int, params_b: float) -> float:
    return gpus * 989e12 * 0.40 / (6 * params_b * 1e9)


FSX = {"fsx": {"deployment": "PERSISTENT_2", "storage_tib": 2.4, "mbps_per_tib": 125}}
IMAGES = {"model_params_b": 1, "method": "pretrain", "read_bytes_per_token": 600}


def test_a_small_vision_model_on_four_nodes_outruns_a_small_fsx(tmp_path):
    data = aws(count=4, workload=IMAGES, storage={"shared": FSX})
    plan = load(tmp_path, data)
    rate = data_rate(plan)
    assert rate.tokens_per_s == pytest.approx(tokens_per_s(32, 1))  # ~2.1 M tokens/s
    assert rate.gbps == pytest.approx(tokens_per_s(32, 1) * 600 / 1e9)  # ~1.27 GB/s
    f = found(tmp_path, data)["shared-read-slow"]
    assert (f.level, f.path) == ("warning", ("workload", "read_bytes_per_token"))
    assert "about 2,109,867 tokens/s at 40% MFU, reading 600 bytes a token: 1.3 GB/s" in f.message
    assert (
        "FSx for Lustre PERSISTENT_2, 2.4 TiB x 125 MB/s/TiB, which delivers 300 MB/s" in f.message
    )
    assert "keep data loading under 50%" in f.message


@pytest.mark.parametrize(
    ("workload", "shared", "warns"),
    [
        # Tokenized text (4 bytes a token) for a 70B model: 120 kB/s, nothing to say.
        ({"model_params_b": 70, "method": "pretrain"}, {"fsx": {"storage_tib": 1.2}}, False),
        # The same images at 1000 MB/s/TiB x 4.8 TiB (4.8 GB/s): under half of it.
        (IMAGES, {"fsx": {"storage_tib": 4.8, "mbps_per_tib": 1000}}, False),
        # A declared NFS server of 2 GB/s: 1.27 GB/s is over half of it.
        (IMAGES, {"server": {"type": "nfs", "address": "10.0.9.5", "export": "/data", "read_gbps": 2}}, True),
        # Datasets not on the tier: nothing to check.
        (IMAGES, {"holds": ["home"], "fsx": {}}, False),
    ],
)  # fmt: skip
def test_data_loading_against_the_tier(tmp_path, workload, shared, warns):
    data = aws(count=4, workload=workload, storage={"shared": shared})
    assert ("shared-read-slow" in found(tmp_path, data)) is warns


def test_checkpoints_through_the_shared_tier(tmp_path):
    w = {"model_params_b": 70, "method": "full", "checkpoint_contents": "weights"}
    shared = {
        "holds": ["datasets", "checkpoints"],
        "fsx": {"storage_tib": 2.4, "mbps_per_tib": 250},
    }
    f = found(tmp_path, aws(count=2, workload=w, storage={"shared": shared}))[
        "shared-checkpoint-slow"
    ]
    # 140 GB of weights at 2.4 x 250 = 600 MB/s: 233 s.
    assert "a 140 GB checkpoint through FSx for Lustre PERSISTENT_2" in f.message
    assert "at 600 MB/s takes 233 s (rule of thumb: 10 s or less)" in f.message
    assert f.path == ("storage", "shared", "holds")


def test_a_server_without_figures_is_named_not_passed(tmp_path):
    shared = {"holds": ["datasets", "checkpoints"],
              "server": {"type": "lustre", "address": "mgs.dc1.example.net", "export": "scratch"}}  # fmt: skip
    w = {"model_params_b": 7, "method": "full"}
    out = found(tmp_path, bare(hosts=2, workload=w, storage={"shared": shared}))
    f = out["shared-throughput-unknown"]
    assert "LUSTRE mgs.dc1.example.net:scratch's throughput is unknown" in f.message
    assert "read_gbps (data loading) and write_gbps (checkpoints)" in f.message
    assert "shared-read-slow" not in out and "shared-checkpoint-slow" not in out


def on_aws(shared: str) -> str:
    """Two p5 nodes, with `storage.shared`'s lines."""
    return aws_text(f"storage:\n  shared:\n{shared}\n")


def on_metal(shared: str) -> str:
    """One bare-metal host, with `storage.shared`'s lines."""
    return bare_text(f"storage:\n  shared:\n{shared}\n")


@pytest.mark.parametrize(
    ("template", "shared"),
    [
        (on_aws, "    fsx: {}"),
        (on_aws, "    fsx: {deployment: SCRATCH_2, storage_tib: 9.6, import_path: 's3://ml-datasets/tokens/'}"),
        (on_aws, "    fsx: {file_system_id: fs-0123456789abcdef0}"),
        (on_aws, "    holds: [home]\n    efs: {throughput_mode: bursting}"),
        (on_aws, "    holds: [home]\n    efs: {file_system_id: fs-0abc1234, retain: false}"),
        (on_metal, "    server: {type: nfs, address: 10.0.9.5, export: /export/data, options: nconnect=8}"),
        (on_metal, "    holds: [datasets, checkpoints, home]\n    mount: /lustre\n    server: {type: lustre, address: mgs-01, export: fs1}"),
        # A small site: the NFS server is one of the blueprint's hosts; users with the same ids.
        (on_metal, "    holds: [datasets, home]\n    server: {type: nfs, host: hgx-01, export: /srv/shared}\n"
                   "    groups: [{name: ml, gid: 3000}]\n"
                   "    users: [{name: alice, uid: 3001, group: ml}, {name: carol-ops, uid: 3003}]"),
    ],
)  # fmt: skip
def test_a_tier_the_target_offers_is_valid(tmp_path, template, shared):
    _, r = validate_text(tmp_path, template(shared))
    assert r.returncode in (0, 1), r.stderr  # 1: a preflight warning elsewhere is fine
    assert "storage.shared" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("template", "shared", "where", "message"),
    [
        (on_metal, "    fsx: {}", ":14:", "storage.shared.fsx: fsx is not a data tier on bare_metal"),
        (on_metal, "    efs: {}", ":14:", "storage.shared.efs: efs is not a data tier on bare_metal"),
        (on_aws, "    fsx: {}\n    efs: {}", ":10:", "give exactly one of server (an NFS or Lustre server), fsx or efs"),
        (on_aws, "    efs: {throughput_mode: provisioned}", ":9:", "throughput_mode"),
        (on_aws, "    fsx: {storage_tib: 3}", ":9:", "3 TiB is not an FSx for Lustre SSD capacity"),
        (on_aws, "    fsx:\n      deployment: PERSISTENT_1\n      mbps_per_tib: 125", ":11:",
         "storage.shared.fsx.mbps_per_tib: PERSISTENT_1 offers 50, 100, 200 MB/s per TiB, not 125"),
        (on_aws, "    fsx: {deployment: SCRATCH_2, mbps_per_tib: 500}", ":9:", "leave it out (SCRATCH_2 has a fixed 200)"),
        (on_aws, "    mount: /mnt/checkpoints\n    fsx: {}", ":9:",
         "storage.shared.mount: /mnt/checkpoints is the checkpoint array's mount too"),
        (on_aws, "    holds: [datasets, datasets]\n    fsx: {}", ":9:", "storage.shared.holds[1]: 'datasets' is named twice"),
        (on_aws, "    holds: [datasets]", ":9:", "give exactly one of server"),
        (on_metal, "    server: {type: nfs, address: 'nfs server', export: /d}", ":14:", "'nfs server' is neither an IP address nor a host name"),
        (on_aws, "    fsx: {file_system_id: fsx-1}", ":9:", "file_system_id"),
        (on_aws, "    mount: /home\n    fsx: {}", ":9:", "'/home' is not a safe mount point"),
        # The serving host must be a host of this blueprint, serve NFS, and export a path.
        (on_metal, "    server: {type: nfs, host: hgx-09, export: /srv}", ":14:",
         "storage.shared.server.host: 'hgx-09' is not a host of this blueprint"),
        (on_metal, "    server: {type: lustre, host: hgx-01, export: fs1}", ":14:",
         "rackform serves only NFS from a host of the blueprint"),
        (on_metal, "    server: {type: nfs, host: hgx-01, export: srv}", ":14:", "'srv' is no path on hgx-01"),
        (on_metal, "    server: {type: nfs, export: /srv}", ":14:", "the nodes need the server's address"),
        (on_aws, "    server: {type: nfs, host: node-1, export: /srv}", ":9:",
         "this target's nodes are created by the stack"),
        # Ids: each once, a user's group declared, a private group's gid free.
        (on_metal, "    server: {type: nfs, address: 10.0.0.9, export: /d}\n    users:\n"
                   "      - {name: alice, uid: 3001}\n      - {name: bob, uid: 3001}", ":17:",
         "storage.shared.users[1].uid: uid 3001 is given twice"),
        (on_metal, "    server: {type: nfs, address: 10.0.0.9, export: /d}\n"
                   "    users: [{name: alice, uid: 3001, group: ml}]", ":15:",
         "'ml' is not one of storage.shared.groups"),
        (on_metal, "    server: {type: nfs, address: 10.0.0.9, export: /d}\n"
                   "    groups: [{name: ml, gid: 3001}]\n    users: [{name: alice, uid: 3001}]", ":16:",
         "alice's own group would take gid 3001, which is ml's"),
        (on_metal, "    server: {type: nfs, address: 10.0.0.9, export: /d}\n"
                   "    users: [{name: root, uid: 0}]", ":15:", "greater than or equal to 1000"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_located_line(tmp_path, template, shared, where, message):
    f, r = validate_text(tmp_path, template(shared))
    line = located_line(f, r)
    assert line.startswith(f"{f}{where}") and message in line, line
