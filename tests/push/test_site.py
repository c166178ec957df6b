"""What a push reads from the site playbook: its roles, the roles of its cluster-wide plays, the
check before each batch and the default share of a batch that may fail, each from the playbook
itself, so an edit of the playbook is what the push knows."""

from __future__ import annotations

import re

import pytest
import yaml

from rackform.paths import site
from rackform.push.site import CLUSTER_TAG, PlaybookError, parse, site_playbook

SHIPPED = site().read_text(encoding="utf-8")


def plays() -> list[dict]:
    return yaml.safe_load(SHIPPED)


def test_the_shipped_playbook_as_a_push_reads_it():
    got = site_playbook()
    assert got.roles == (
        "nvidia_driver", "nccl_rdma", "nvme_raid", "dcgm", "imex", "shared_storage", "slurm",
        "smoke_train",
    )  # fmt: skip
    # dcgm's cluster-wide part is a play of tasks (the scrape config), slurm's and the smoke
    # job's whole plays.
    assert got.cluster_roles == ("dcgm", "slurm", "smoke_train")
    assert got.batch_check.startswith("Go on only where the batch before this one converged")
    (default,) = set(re.findall(r"rackform_max_fail_percent \| default\((\d+)\)", SHIPPED))
    assert got.max_fail_percent == int(default) == 25
    assert site_playbook() is got  # read once


def test_a_role_added_to_the_playbook_is_a_role_the_push_knows():
    book = plays()
    converge = next(p for p in book if p["name"] == "Converge the GPU nodes")
    converge["roles"].append({"role": "rackform.gpu.infiniband_sm", "tags": ["infiniband_sm"]})
    book.append(
        {"name": "Spread the fabric's topology", "hosts": "gpu_nodes", "tags": [CLUSTER_TAG],
         "roles": [{"role": "rackform.gpu.topology", "tags": ["topology"]}]}
    )  # fmt: skip
    got = parse(yaml.safe_dump(book, sort_keys=False))
    assert got.roles[:5] == ("nvidia_driver", "nccl_rdma", "nvme_raid", "dcgm", "infiniband_sm")
    assert got.roles[-1] == "topology"
    assert got.cluster_roles == ("dcgm", "slurm", "smoke_train", "topology")


def test_the_default_share_is_the_playbooks_and_must_be_one():
    assert parse(SHIPPED.replace("default(25)", "default(10)")).max_fail_percent == 10
    once = SHIPPED.replace("default(25)", "default(10)", 1)
    with pytest.raises(PlaybookError, match=r"should give one N, found 10, 25"):
        parse(once)
    without = SHIPPED.replace("rackform_max_fail_percent | default(25)", "50")
    with pytest.raises(PlaybookError, match="found none"):
        parse(without, "x.yml")
