"""The shared_storage role's derived values, rendered by Ansible's own templating from the
variables rackform's plan gives it: what each node mounts (source, type, options), what the
serving host exports and to whom, and the export's file. The VM e2e mounts them for real
(tests/e2e/test_shared_vms.py); here every kind the plan can hand over, NFS, Lustre and FSx, EFS,
is rendered, including the ones only AWS runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from gpu_collection import ROLES_DIR
from planhelp import AWS_TRAINING, BARE_METAL, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import thaw

ROLE = ROLES_DIR / "shared_storage"
# node1's facts as Ansible gathers them (the testbed's private interface).
FACTS = {
    "default_ipv4": {"interface": "eth0", "address": "192.168.1.5"},
    "priv0": {"ipv4": {"address": "10.77.0.11", "network": "10.77.0.0", "prefix": "24"}},
    "ib0": {"ipv4": {"address": "10.60.0.11", "network": "10.60.0.0", "prefix": "22"}},
}


def render(variables: dict, host: str, names: list[str], facts: dict | None = None) -> list:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    own = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    env = {
        **defaults,
        **variables,
        **{k: trust_as_template(v) if isinstance(v, str) else v for k, v in own.items()},
        "inventory_hostname": host,
        "hostvars": {"node1": {"ansible_facts": facts if facts is not None else FACTS}},
    }
    templar = Templar(loader=DataLoader(), variables=env)
    return [templar.template(trust_as_template("{{ %s }}" % n)) for n in names]  # noqa: UP031


def plan_vars(tmp_path, doc: dict) -> dict:
    return thaw(compile_effective(load_effective(write_blueprint(tmp_path, doc))).group_vars)


NAMES = ["_shared_storage_source", "_shared_storage_fstype", "_shared_storage_mount_options",
         "_shared_storage_serves"]  # fmt: skip


def test_a_served_export_is_reached_at_the_servers_fabric_address(tmp_path):
    doc = variant(BARE_METAL, **{"network": {"fabric": "infiniband", "interfaces": ["ib0"]}})
    doc["node_groups"][0]["hosts"][0]["name"] = "node1"
    doc["storage"] = {"shared": {"server": {"type": "nfs", "host": "node1", "export": "/srv/ml"}}}
    v = plan_vars(tmp_path, doc)
    source, fstype, options, serves = render(v, "n2", NAMES)
    assert (source, fstype, serves) == ("10.60.0.11:/srv/ml", "nfs", False)
    assert options == "vers=4.2,hard,noatime,_netdev"
    assert render(v, "node1", ["_shared_storage_serves"]) == [True]
    # It exports to its network on that interface, and nothing wider.
    (clients,) = render(v, "node1", ["_shared_storage_clients"])
    assert clients == ["10.60.0.0/22"]
    text = (ROLE / "templates" / "rackform.exports.j2").read_text(encoding="utf-8")
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    env = {**defaults, **v, "_shared_storage_clients": clients, "ansible_managed": "managed"}
    out = Templar(loader=DataLoader(), variables=env).template(trust_as_template(text))
    assert (
        out.strip().splitlines()[-1] == "/srv/ml 10.60.0.0/22(rw,sync,no_subtree_check,root_squash)"
    )


def test_a_server_without_its_facts_says_so_in_preflight_not_a_crash(tmp_path):
    doc = variant(BARE_METAL)
    doc["node_groups"][0]["hosts"][0]["name"] = "node1"
    doc["storage"] = {"shared": {"server": {"type": "nfs", "host": "node1", "export": "/srv"}}}
    v = plan_vars(tmp_path, doc)
    (address,) = render(v, "n2", ["_shared_storage_server_address"], facts={})
    assert address.strip() == ""  # the preflight's "the nodes know where the server is" fails


@pytest.mark.parametrize(
    ("shared", "outputs", "source", "fstype", "options"),
    [
        # An existing server with its own options, and an older NFS version.
        ({"server": {"type": "nfs", "address": "nas.dc1", "export": "/ml", "options": "nconnect=8",
                     "nfs_version": "4.1"}}, {},
         "nas.dc1:/ml", "nfs", "vers=4.1,hard,noatime,_netdev,nconnect=8"),
        # FSx for Lustre: DNS@tcp:/MOUNTNAME from the stack, its user guide's options.
        ({"fsx": {}}, {"shared_storage_address": "fs-1.fsx.us-east-1.amazonaws.com",
                       "shared_storage_export": "abcdef12"},
         "fs-1.fsx.us-east-1.amazonaws.com@tcp:/abcdef12", "lustre", "_netdev,relatime,flock"),
        # EFS: DNS:/ over NFS 4.1 with its recommended settings.
        ({"efs": {}}, {"shared_storage_address": "fs-2.efs.us-east-1.amazonaws.com"},
         "fs-2.efs.us-east-1.amazonaws.com:/", "nfs",
         "vers=4.1,hard,noatime,_netdev,rsize=1048576,wsize=1048576,timeo=600,retrans=2,noresvport"),
    ],
)  # fmt: skip
def test_what_each_kind_of_tier_mounts(tmp_path, shared, outputs, source, fstype, options):
    base = BARE_METAL if "server" in shared else AWS_TRAINING
    v = plan_vars(tmp_path, variant(base, **{"storage": {"shared": shared}}))
    got = render({**v, **outputs}, "n2", NAMES)
    assert got == [source, fstype, options, False]


def test_automount_is_the_users_choice(tmp_path):
    v = plan_vars(tmp_path, variant(BARE_METAL, **{"storage": {"shared": {
        "server": {"type": "nfs", "address": "10.0.0.9", "export": "/d"}}}}))  # fmt: skip
    (options,) = render(
        {**v, "shared_storage_automount": True}, "n2", ["_shared_storage_mount_options"]
    )
    assert options.split(",")[-1] == "x-systemd.automount"
    assert Path(ROLE / "templates" / "check.service.j2").read_text().count("RequiresMountsFor") == 1
