"""The slurm role's topology.yaml (Slurm 25.05 and later: the NVLink domains' blocks and the
fabric's tree at once), rendered by Ansible's own template engine as tests/roles/test_slurm_config.py
renders the role's files, with each host's Slurm version as tasks/facts.yml sets it
(`_slurm_version`, slurm-client's package version as dpkg gives it: Debian forky's
26.05.5-1, trixie's 24.11.5-4+deb13u1). What Slurm 26.05 does with the file is
tests/scheduler/test_slurm_topology_yaml.py."""

from __future__ import annotations

import pytest
import yaml
from ansible.template import Templar, trust_as_template
from test_slurm_config import ROLE, _runs, _tasks, lines, role_var, templar
from topology_bp import nvl72_site, write

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.slurm_topology import FABRIC, NVLINK, topology_yaml

# Two NVL72 racks whose InfiniBand leaves each hold one tray of every rack, a spine above.
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


def on(t: Templar, versions: dict[str, str], **extra) -> Templar:
    """The templar with each host's `_slurm_version` (a host missing: not read) and `extra`
    variables over the plan's."""
    v = dict(t.available_variables)
    v["hostvars"] = {
        h: {**hv, **({"_slurm_version": versions[h]} if h in versions else {})}
        for h, hv in v["hostvars"].items()
    }
    return t.copy_with_new_env(available_variables=v | extra)


def rendered(t: Templar, name: str) -> str:
    text = (ROLE / "templates" / f"{name}.j2").read_text(encoding="utf-8")
    return t.template(trust_as_template(text))


def task(file: str, name: str) -> dict:
    return next(t for t in _tasks(file) if t["name"] == name)


def holds(t: Templar, file: str, name: str) -> bool:
    """Whether every `that` of a preflight assert holds on the templar's host."""
    return all(role_var(t, f"({c})") for c in task(file, name)["ansible.builtin.assert"]["that"])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    path = write(tmp_path_factory.mktemp("nvl72-ib"), SITE)
    plan = compile_effective(load_effective(path))
    base = templar(path)
    hosts = list(base.available_variables["hostvars"])
    return plan, base, hosts


def test_on_slurm_26_every_host_gets_the_plans_yaml_and_partitions_name_their_topology(site):
    plan, base, hosts = site
    t = on(base, dict.fromkeys(hosts, "26.05.5-1"))
    assert role_var(t, "_slurm_files")[-1] == "topology.yaml"
    text = rendered(t, "topology.yaml")
    assert text == "# Ansible managed\n" + topology_yaml(plan.topology)
    assert [x["topology"] for x in yaml.safe_load(text)] == [NVLINK, FABRIC]
    # Every partition the cluster default (the blocks) where it names none; one that asks for
    # the fabric gets the tree.
    assert [p["Topology"] for p in lines(rendered(t, "slurm.conf"), "PartitionName=")] == [NVLINK]
    asks = [p | {"topology": FABRIC} for p in t.available_variables["slurm_partitions"]]
    conf = rendered(on(t, {}, slurm_partitions=asks), "slurm.conf")
    assert [p["Topology"] for p in lines(conf, "PartitionName=")] == [FABRIC]
    assert not _runs(
        t,
        task(
            "config.yml",
            "Remove a topology.yaml the plan no longer gives (or this Slurm does not read)",
        ),
    )
    # topology.conf stays the blocks (what a Slurm before 25.05 reads, and the plugin's line).
    assert "BlockName=nvl-r1" in rendered(t, "topology.conf")


@pytest.mark.parametrize("older", ["24.11.5-4+deb13u1", None])
def test_one_host_on_an_older_slurm_keeps_topology_conf_alone_for_all(site, older):
    # One host on 24.11, or one whose version was not read: no host gets topology.yaml (slurm.conf
    # must be the same everywhere), a stale one is removed, and the role says why.
    _, base, hosts = site
    versions = dict.fromkeys(hosts, "26.05.5-1")
    if older:
        versions["gb2-t02"] = older
    else:
        del versions["gb2-t02"]
    t = on(base, versions)
    assert "topology.yaml" not in role_var(t, "_slurm_files")
    assert "Topology=" not in rendered(t, "slurm.conf")
    assert _runs(
        t,
        task(
            "config.yml",
            "Remove a topology.yaml the plan no longer gives (or this Slurm does not read)",
        ),
    )
    assert _runs(t, task("config.yml", "Say why topology.yaml is not written"))


def test_without_a_yaml_nothing_new_runs_and_slurm_conf_is_as_before(tmp_path):
    # An NVL72 site without declared switches: topology.conf's blocks say all there is.
    bare = templar(write(tmp_path, nvl72_site(racks=2, trays=2)))
    assert role_var(bare, "slurm_topology_yaml") == ""
    facts = _tasks("facts.yml")
    version = [x for x in facts if "dpkg-query" in str(x.get("ansible.builtin.command", ""))]
    assert version and not any(_runs(bare, x) for x in version)
    assert not _runs(bare, task("config.yml", "Say why topology.yaml is not written"))
    assert "Topology=" not in rendered(bare, "slurm.conf")


def test_preflight_refuses_a_partition_naming_a_topology_the_yaml_lacks(site, tmp_path):
    _, base, _ = site
    check = "Preflight | A partition's topology is one of topology.yaml's"
    assert holds(base, "preflight.yml", check)
    wrong = [p | {"topology": "torus"} for p in base.available_variables["slurm_partitions"]]
    assert not holds(on(base, {}, slurm_partitions=wrong), "preflight.yml", check)
    # A partition naming one where the plan gives no topology.yaml at all.
    bare = templar(write(tmp_path, nvl72_site(racks=2, trays=2)))
    asks = [p | {"topology": FABRIC} for p in bare.available_variables["slurm_partitions"]]
    assert not holds(on(bare, {}, slurm_partitions=asks), "preflight.yml", check)
    # A yaml without its topology.conf, or without a cluster default, is refused too.
    pair = "Preflight | A topology.yaml from the plan comes with its topology.conf and a default"
    assert holds(base, "preflight.yml", pair)
    assert not holds(on(base, {}, slurm_topology_conf=""), "preflight.yml", pair)
    no_default = plan_yaml_without_default(base)
    assert not holds(on(base, {}, slurm_topology_yaml=no_default), "preflight.yml", pair)


def plan_yaml_without_default(t: Templar) -> str:
    doc = yaml.safe_load(t.available_variables["slurm_topology_yaml"])
    return yaml.safe_dump([{k: v for k, v in x.items() if k != "cluster_default"} for x in doc])
