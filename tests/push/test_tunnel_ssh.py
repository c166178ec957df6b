"""SSH through an EC2 Instance Connect Endpoint stays within its limits: at most 20 concurrent
connections per endpoint, and none older than an hour (EC2 user guide, "Connect using EC2
Instance Connect Endpoint to a Linux instance", limitations).

No endpoint and no sshd here: a real ansible-playbook run through rackform's runner, over 26
hosts of a tunnelled inventory, with a recording stand-in for `ssh` (ansible_ssh_executable)
that logs when each ssh started and ended and with which options, then runs the remote command
on this machine. Each ssh opens one tunnel through its ProxyCommand unless it shares a master
connection; the tunnels are counted from the log by OpenSSH's documented sharing rules
(ssh_config(5): ControlMaster, ControlPath, ControlPersist)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from rackform.catalog.preflight import load_preflight_figures
from rackform.push.access import TUNNEL_SSH_ARGS, with_access
from rackform.push.playbook import run_playbook

HOSTS = 26  # more than the endpoint's 20
ANSIBLE_DEFAULT_SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=60s"

FAKE_SSH = r"""
import json, os, subprocess, sys, time
args = sys.argv[1:]
options, i = [], 0
while i < len(args) and args[i].startswith("-"):
    if args[i] in ("-o", "-p", "-i", "-l", "-F", "-E"):
        options.append(args[i + 1])
        i += 2
    else:
        options.append(args[i])
        i += 1
host, remote = args[i], " ".join(args[i + 1:])
start = time.time()
done = subprocess.run(["/bin/sh", "-c", remote])
line = json.dumps({"host": host, "start": start, "end": time.time(), "options": options})
with open(os.environ["FAKE_SSH_LOG"], "a") as f:
    f.write(line + "\n")
sys.exit(done.returncode)
"""

# What an EC2 Instance Connect Endpoint carries at once (the catalog's figure the runner uses).
TUNNEL_FORKS = int(load_preflight_figures().configure.tunnel_connections.value)


def tunnels(calls: list[dict], ssh_args: str) -> int:
    """The most tunnels open at once. Sharing (ControlMaster auto with a ControlPath): a host's
    first ssh starts a master that holds the one tunnel until ControlPersist after its last
    client; without it, every ssh is its own tunnel for as long as it runs."""
    opts = dict(o.split("=", 1) for o in ssh_args.split() if "=" in o)
    shared = opts.get("ControlMaster") == "auto" and opts.get("ControlPath", "") != "none"
    persist = float(opts.get("ControlPersist", "0s").rstrip("s")) if shared else 0.0
    spans = []
    if shared:
        for host in {c["host"] for c in calls}:
            mine = [c for c in calls if c["host"] == host]
            spans.append((min(c["start"] for c in mine), max(c["end"] for c in mine) + persist))
    else:
        spans = [(c["start"], c["end"]) for c in calls]
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def inventory(fake_ssh: Path) -> dict:
    hosts = {
        f"node{i:02d}": {"ansible_host": "127.0.0.1", "rackform_instance_id": f"i-{i:017x}"}
        for i in range(HOSTS)
    }
    return {
        "all": {
            "vars": {
                "ansible_python_interpreter": sys.executable,
                "ansible_ssh_executable": str(fake_ssh),
                "rackform_ssh_proxy": "aws ec2-instance-connect open-tunnel --region us-east-1"
                " --instance-id {{ rackform_instance_id }}",
            },
            "children": {"gpu_nodes": {"children": {"ng_serve": {"hosts": hosts}}}},
        }
    }


def test_tunnelled_ssh_shares_no_connection_and_direct_ssh_keeps_ansibles_default():
    inv = {"all": {"vars": {"rackform_ssh_proxy": "aws ec2-instance-connect open-tunnel"}}}
    tunnelled = with_access(inv, {})["all"]["vars"]
    assert tunnelled["ansible_ssh_args"] == TUNNEL_SSH_ARGS
    assert "ControlPath=none" in TUNNEL_SSH_ARGS and "ServerAliveInterval=" in TUNNEL_SSH_ARGS
    assert "ProxyCommand=" in tunnelled["ansible_ssh_common_args"]
    direct = with_access({"all": {"vars": {}}}, {})["all"]["vars"]
    assert "ansible_ssh_args" not in direct  # bare metal keeps connection sharing


def test_a_converge_over_more_hosts_than_the_endpoint_takes_stays_within_20_tunnels(
    tmp_path, monkeypatch
):
    fake = tmp_path / "ssh"
    fake.write_text(f"#!{sys.executable}\n{FAKE_SSH}")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.command: sleep 0.5\n      changed_when: false\n"
        "    - ansible.builtin.command: sleep 0.5\n      changed_when: false\n"
    )
    result = run_playbook(with_access(inventory(fake), {}), playbook=book, out=lambda _: None)
    assert result.rc == 0, result.failures
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({c["host"] for c in calls}) == 1  # every node is 127.0.0.1 here
    for c in calls:
        c["host"] = next(o for o in c["options"] if o.startswith("ProxyCommand="))
    assert len({c["host"] for c in calls}) == HOSTS  # each through its own instance's tunnel
    assert all(set(TUNNEL_SSH_ARGS.split()) <= set(["-o", *c["options"]]) for c in calls)
    measured = tunnels(calls, TUNNEL_SSH_ARGS)
    assert 1 < measured <= TUNNEL_FORKS, measured
    # The same run under Ansible's default sharing would have held a tunnel per host: over the
    # endpoint's limit (what rackform did before).
    assert tunnels(calls, ANSIBLE_DEFAULT_SSH_ARGS) == HOSTS > TUNNEL_FORKS
