"""A block and a tree topology at once through a real Slurm 26.05 (Debian forky's, in a root
built once into the cache: rackform/testbed/slurm_root.py, run as tests/slurm_block_local.py
runs Debian 13's), reading the topology.yaml the plan renders
(`rackform.plan.slurm_topology.topology_yaml`, what the slurm role writes where the node's Slurm
is 25.05 or later) for a small NVL72 site whose InfiniBand leaves cross its racks: each leaf
holds one tray of each rack, so the tree's groups are not the blocks, and a job that follows one
cannot pass for following the other.

topology.yaml(5) and slurm.conf(5) of this Slurm (26.05, read 2026-12-05 from the root's own
man pages; https://slurm.schedmd.com/topology.yaml.html): several named topologies, the first
with `cluster_default: true` for partitions that name none, a partition naming another with
`Topology=`; where topology.yaml exists topology.conf is ignored (the cluster is also given the
plan's topology.conf, as a node upgraded from 24.11 would have it).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from ansible.plugins.test.core import version_compare
from slurm_block_local import BlockSlurm, block_cluster, nodes_of, occupy
from topology_bp import nvl72_site, write

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.slurm_topology import FABRIC, NVLINK, topology_conf, topology_yaml
from rackform.scheduler.hostlist import expand

ROLE = Path(__file__).resolve().parents[2] / "roles" / "slurm"

# Each rack's tray t on leaf ib-l<t>; a spine above the leaves.
LEAVES = {f"ib-l{t}": [f"gb{r}-t0{t}" for r in (1, 2)] for t in (1, 2)}
SITE = nvl72_site(
    racks=2,
    trays=2,
    topology={
        "switches": [
            *({"name": leaf, "nodes": nodes} for leaf, nodes in LEAVES.items()),
            {"name": "ib-spine", "switches": list(LEAVES)},
        ]
    },
)
# One partition per topology, every node in each (slurm.conf(5): Topology=).
PARTITIONS = (
    f"PartitionName=nvl Nodes=ALL Default=NO MaxTime=INFINITE State=UP Topology={NVLINK}\n"
    f"PartitionName=fab Nodes=ALL Default=NO MaxTime=INFINITE State=UP Topology={FABRIC}\n"
)


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> BlockSlurm:
    site = write(tmp_path_factory.mktemp("nvl72-ib"), SITE)
    topology = compile_effective(load_effective(site)).topology
    conf, text = topology_conf(topology).text, topology_yaml(topology)
    assert text, "the plan gives no topology.yaml for a site with domains and switches"
    started = time.monotonic()
    cluster = block_cluster(
        tmp_path_factory.mktemp("slurm-yaml"),
        conf,
        suite="forky",
        topology_yaml=text,
        extra_conf=PARTITIONS,
    )
    built = "cached" if cluster.built_s is None else f"built in {cluster.built_s:.0f} s"
    print(
        f"\nSlurm {cluster.version} (root {built}) up with {len(cluster.topology.nodes)} nodes "
        f"in {time.monotonic() - started:.0f} s"
    )
    yield cluster
    cluster.slurm.shutdown()


@pytest.fixture
def cluster(both: BlockSlurm) -> BlockSlurm:
    """The cluster, clean: no job, every node in service."""
    both.slurm.clean()
    return both


def leaf_of(node: str) -> str:
    return next(leaf for leaf, nodes in LEAVES.items() if node in nodes)


def test_slurm_runs_both_topologies_of_the_plans_yaml(cluster):
    # scontrol(1) of this Slurm: `show topoconf` "displays running configurations of multiple
    # topologies in the same format as topology.yaml".
    running = yaml.safe_load(cluster.slurm.run("scontrol", "show", "topoconf").stdout)
    by_name = {t["topology"]: t for t in running}
    assert set(by_name) == {NVLINK, FABRIC}, running
    assert by_name[NVLINK].get("cluster_default") is True, running
    blocks = {b["block"]: expand(b["nodes"]) for b in by_name[NVLINK]["block"]["blocks"]}
    assert blocks == {name: list(m) for name, m in cluster.topology.blocks.items()}, running
    leaves = {
        s["switch"]: expand(s["nodes"])
        for s in by_name[FABRIC]["tree"]["switches"]
        if s.get("nodes")
    }
    assert leaves == LEAVES, running
    # The tree is also what `show topology <name>` answers for it; topology.conf (blocks only)
    # could not have given it: where topology.yaml exists Slurm ignores topology.conf.
    tree = cluster.slurm.run("scontrol", "show", "topology", FABRIC).stdout
    spine = re.search(r"^SwitchName=ib-spine Level=1 .*Switches=(\S+)$", tree, re.MULTILINE)
    assert spine and expand(spine.group(1)) == list(LEAVES), tree
    parts = cluster.slurm.run("scontrol", "show", "partition").stdout
    for name, topo in (("nvl", NVLINK), ("fab", FABRIC)):
        block = parts.split(f"PartitionName={name}\n", 1)[1].split("PartitionName=", 1)[0]
        assert f"Topology={topo}" in block, parts


def test_a_segment_on_the_block_partition_lands_in_one_block(cluster):
    # gb1-t01 busy: the first idle pair in slurm.conf's order (gb1-t02, gb2-t01) spans two
    # racks, and the fabric's leaves pair trays across racks; only the blocks put the job in
    # rack 2.
    occupy(cluster, "gb1-t01")
    job = cluster.slurm.sbatch("-p", "nvl", "-N2", "--segment=2", "--wrap", "sleep 300")
    cluster.slurm.wait_state(job, "RUNNING")
    got = nodes_of(cluster, job)
    assert {cluster.topology.block_of(n) for n in got} == {"nvl-r2"}, got


def test_the_tree_partitions_job_follows_the_switches(cluster):
    # gb1-t01 busy: one leaf with two idle nodes is left (ib-l2: each rack's second tray);
    # blocks or no topology would take a rack's two trays or the first idle pair instead.
    occupy(cluster, "gb1-t01")
    job = cluster.slurm.sbatch("-p", "fab", "-N2", "--switches=1", "--wrap", "sleep 300")
    cluster.slurm.wait_state(job, "RUNNING")
    got = nodes_of(cluster, job)
    assert sorted(got) == LEAVES["ib-l2"] and {leaf_of(n) for n in got} == {"ib-l2"}, got


def test_the_roles_version_question_answers_25_05_or_later_here(cluster):
    """The slurm role writes topology.yaml where its question (tasks/facts.yml: slurm-client's
    package version from dpkg) compares at or above its threshold (vars/main.yml) with Ansible's
    `version` test: asked in this root, as the role asks a host (dpkg needs no slurm.conf)."""
    facts = yaml.safe_load((ROLE / "tasks" / "facts.yml").read_text(encoding="utf-8"))
    ask = next(t for t in facts if "dpkg-query" in str(t.get("ansible.builtin.command", "")))
    argv = ask["ansible.builtin.command"]["argv"]
    got = cluster.slurm.run(*argv).stdout.strip()
    since = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_slurm_topology_yaml_since"]
    assert got == cluster.version and version_compare(got, since, ">="), (got, since)
