"""Every role acts as root: a target whose login user is not root has Ansible become root (sudo)
on every node, on bare metal and colocation as on AWS, and a root login needs none. The
compiled inventory of each example blueprint, read by Ansible's own inventory and variable
managers as a play over it would read them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.inventory import inventory_hosts, with_nodes
from rackform.plan.model import thaw

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "blueprints").glob("*.yaml"))


def _host_vars(tmp_path: Path, blueprint: Path) -> tuple[str, dict[str, dict]]:
    plan = compile_effective(load_effective(blueprint))
    inv = thaw(plan.inventory)
    if not inventory_hosts(inv):  # AWS: the nodes come with the stack's outputs
        made = {g.name: [[f"{g.name}-0", "10.0.0.11", 22, "i-0a"]] for g in plan.node_groups}
        inv = with_nodes(plan, made)
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    manager = VariableManager(loader=loader, inventory=inventory)
    hosts = {h.name: manager.get_vars(host=h) for h in inventory.get_hosts()}
    return plan.target.type, hosts


def _with_user(tmp_path: Path, blueprint: Path, user: str) -> Path:
    doc = yaml.safe_load(blueprint.read_text())
    doc["target"]["ssh_user"] = user
    out = tmp_path / blueprint.name
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_a_login_user_other_than_root_becomes_root_on_every_node(tmp_path, example):
    target, hosts = _host_vars(tmp_path, example)
    assert hosts, f"{example.name}: no host to look at"
    for name, got in hosts.items():
        if got["ansible_user"] != "root":
            assert got.get("ansible_become") is True, f"{target} {name}: {got['ansible_user']}"


ONPREM = [p for p in EXAMPLES if yaml.safe_load(p.read_text())["target"]["type"] != "aws"]


@pytest.mark.parametrize("example", ONPREM, ids=[p.stem for p in ONPREM])
def test_on_premises_hosts_become_root_by_their_login_user(tmp_path, example):
    # bare metal and colocation: the blueprint's ssh_user (AWS: the image's user, always sudo).
    user = _host_vars(tmp_path, _with_user(tmp_path, example, "ops"))[1]
    assert {(v["ansible_user"], v.get("ansible_become")) for v in user.values()} == {("ops", True)}
    root = _host_vars(tmp_path, _with_user(tmp_path, example, "root"))[1]
    assert {(v["ansible_user"], v.get("ansible_become")) for v in root.values()} == {("root", None)}
