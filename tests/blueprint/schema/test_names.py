"""Values that reach a command line (ssh's, Ansible's, a shell's on the nodes) or a file a shell
or fstab reads: a blueprint whose user, host, address or path could be read as an option or as
shell code is refused by the loader, each problem located at its file, line and field (the
finding of issue 57: `ssh_user: "-oProxyCommand=touch /tmp/x"` validated, and `rackform jobs`
ran the command). What users write (hyphenated host names, ubuntu, ec2-user, svc_ml$, IPv6
addresses, FQDNs, VLAN interfaces, HCA ports) still loads."""

from __future__ import annotations

import json

import pytest
from blueprint_helpers import BARE_METAL

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.blueprint.schema import names

PROXY = "-oProxyCommand=touch /tmp/x"

# BARE_METAL's target line and first host, for the tests to put values in.
TARGET = "target: {type: bare_metal}"
HOST = "      - {name: n1, address: 10.0.0.1}"


def problems(write, text: str) -> list[str]:
    path = write(text)
    with pytest.raises(BlueprintError) as exc:
        load_effective(path)
    return [str(p).removeprefix(f"{path}:") for p in exc.value.problems]


def loads(write, text: str):
    return load_effective(write(text)).blueprint


@pytest.mark.parametrize(
    "user,why",
    [
        (PROXY, "is not a user name"),
        ("ops@evil.example", "is not a user name"),  # would change the host ssh reaches
        ("ops;reboot", "is not a user name"),
        ("two words", "is not a user name"),
        ("ops\n", "is not a user name"),  # `$` alone would let a trailing newline through
        ("-l", "is not a user name"),
        ("a" * 33, "is not a user name"),
    ],
)
def test_an_ssh_user_that_is_no_user_name_is_refused_at_its_line(write, user, why):
    text = BARE_METAL.replace(TARGET, f"target: {{type: bare_metal, ssh_user: {json.dumps(user)}}}")
    (line,) = problems(write, text)
    assert line.startswith("4:38: target.ssh_user: "), line
    assert f"{user!r} {why}" in line


@pytest.mark.parametrize(
    "host,field,col",
    [
        ("{name: n1, address: '-oProxyCommand=touch /tmp/x'}", "address", 29),
        ("{name: n1, address: '10.0.0.1 -p 2'}", "address", 29),
        ("{name: 'n1 -oProxyCommand=x', address: 10.0.0.1}", "name", 16),
        ("{name: 'n1;reboot', address: 10.0.0.1}", "name", 16),
        ("{name: '-n1', address: 10.0.0.1}", "name", 16),
        ("{name: n1, address: 10.0.0.1, rack: 'r1 Nodes=x'}", "rack", 45),
        ("{name: n1, address: 10.0.0.1, nvme: ['$(reboot)']}", "nvme[0]", 46),
    ],
)
def test_a_host_value_that_could_be_an_option_or_code_is_refused_at_its_field(
    write, host, field, col
):
    (line,) = problems(write, BARE_METAL.replace(HOST, f"      - {host}"))
    assert line.startswith(f"10:{col}: node_groups[0].hosts[0].{field}: "), line
    assert "is not" in line


@pytest.mark.parametrize(
    "network,field",
    [
        ("{fabric: infiniband, interfaces: ['eth0;reboot']}", "interfaces[0]"),
        ("{fabric: infiniband, interfaces: ['$(reboot)']}", "interfaces[0]"),
        ("{fabric: infiniband, hcas: ['mlx5_0 -x']}", "hcas[0]"),
    ],
)
def test_network_names_written_to_the_env_file_a_shell_sources_are_checked(write, network, field):
    (line,) = problems(write, BARE_METAL.replace("{fabric: infiniband}", network))
    assert line.startswith("12:") and f"network.{field}: " in line, line


@pytest.mark.parametrize(
    "storage,path",
    [
        ("{checkpoint: {mount: '/mnt/$(reboot)'}}", "storage.checkpoint.mount"),
        ("{checkpoint: {devices: ['-oX']}}", "storage.checkpoint.devices[0]"),
        ("{checkpoint: {devices: [/dev/../etc/shadow]}}", "storage.checkpoint.devices[0]"),
        (
            "{shared: {mount: /shared, server: {type: nfs, address: '-oX', export: /x}}}",
            "storage.shared.server.address",
        ),
        (
            '{shared: {server: {type: nfs, address: "nfs.example.com\\n", export: /x}}}',
            "storage.shared.server.address",
        ),
        (
            "{shared: {server: {type: nfs, address: 10.0.0.9, export: /x, options: 'rw 0 0'}}}",
            "storage.shared.server.options",
        ),
        (
            "{shared: {server: {type: lustre, address: 10.0.0.9, export: '-fs'}}}",
            "storage.shared.server.export",
        ),
        (
            "{shared: {server: {type: nfs, host: 'n1;x', export: /x}}}",
            "storage.shared.server.host",
        ),
    ],
)
def test_storage_paths_and_addresses_are_checked(write, storage, path):
    lines = problems(write, BARE_METAL + f"storage: {storage}\n")
    assert any(f": {path}: " in line for line in lines), lines


def test_a_rack_name_is_checked_where_the_site_declares_it(write):
    text = BARE_METAL.replace(
        TARGET,
        "target: {type: colocation, site: s1, racks: [{name: 'r1 Switches=x', power_kw: 90}]}",
    )
    lines = problems(write, text)
    assert any(line.startswith("4:53: target.racks[0].name: ") for line in lines), lines


def test_what_users_write_still_loads(write):
    text = (
        BARE_METAL.replace(TARGET, "target: {type: bare_metal, ssh_user: svc_ml$}")
        .replace(HOST, "      - {name: gpu-node-01.dc2, address: 'fd00:10::11', rack: A-01}")
        .replace(
            "{fabric: infiniband}",
            "{fabric: infiniband, interfaces: [bond0.100], hcas: ['mlx5_0:1', mlx5_1]}",
        )
        + "storage:\n"
        "  checkpoint: {mount: /mnt/ckpt_1, devices: [/dev/disk/by-id/nvme-S64H_0T12, S64HNE0T,"
        " /dev/nvme2n1]}\n"
        "  shared:\n"
        "    mount: /shared\n"
        "    server: {type: nfs, address: nfs01.dc2.example.com, export: /export/ml,\n"
        "             options: 'nconnect=8,context=system_u:object_r:nfs_t:s0'}\n"
    )
    bp = loads(write, text)
    assert bp.target.ssh_user == "svc_ml$"
    host = bp.node_groups[0].hosts[0]
    assert (host.name, host.address, host.rack) == ("gpu-node-01.dc2", "fd00:10::11", "A-01")
    assert bp.storage.shared.server.address == "nfs01.dc2.example.com"
    for user in ("root", "ubuntu", "ec2-user", "_svc", "a" * 32):
        text = BARE_METAL.replace(TARGET, f"target: {{type: bare_metal, ssh_user: {user}}}")
        assert loads(write, text).target.ssh_user == user


def test_values_read_from_the_world_are_checked_by_the_same_rules():
    source = "Prometheus (label node)"
    assert names.node_name("gpu-node-01", source) == "gpu-node-01"
    assert names.instance_id("i-0123456789abcdef0", "EC2") == "i-0123456789abcdef0"
    assert names.node_address("fd00::1", "EC2") == "fd00::1"
    assert names.port(22.0, "the stack") == 22.0
    for bad in (PROXY, "node1;rm -rf /", "", "n1\n", None):
        with pytest.raises(names.UnsafeValue, match=r"Prometheus \(label node\) names a node"):
            names.node_name(bad, source)
    for bad_id in ("i-0;touch x", "i-0 %h", "-oProxyCommand=x", "i-0\n"):
        with pytest.raises(names.UnsafeValue, match="EC2 gives instance id"):
            names.instance_id(bad_id, "EC2")
    with pytest.raises(names.UnsafeValue, match="which is no IP address"):
        names.node_address(PROXY, "EC2")
    for bad_port in (0, 65536, "22", True, 22.5, float("inf")):
        with pytest.raises(names.UnsafeValue, match="which is no port number"):
            names.port(bad_port, "the stack")
