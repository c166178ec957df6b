"""Push at scale, with real Ansible: the site playbook's batches and the check that stops a run
after a bad batch, and the runner's retries of the nodes that came back UNREACHABLE.

The batches run the site playbook itself over hosts on this machine (a local connection) with
the dcgm role alone, on hosts without a GPU where nothing may be installed: the role checks its
variables and the host, decides to skip it (dcgm_require_gpu false) and ends, installing
nothing. A host whose dcgm_exporter_port is nv-hostengine's 5555 fails its preflight, as a
broken node would fail a role; a host whose Python does not exist fails the first play's facts.
The retries run over hosts reached through a stand-in for `ssh` (ansible_ssh_executable) that
refuses a host's first connections, as an SSH that cannot connect does (exit 255), then runs
the remote command on this machine; every connection is logged."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from loopback import free_port

from rackform import paths
from rackform.push.access import with_access
from rackform.push.forks import batches
from rackform.push.playbook import RunResult, run_playbook
from rackform.push.report import report_lines
from rackform.push.retries import run
from rackform.push.site import site_playbook
from rackform.push.stage import ConfigureFailed, configure

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
# A role fails on it (the dcgm role's preflight refuses nv-hostengine's port).
FAILS = {**LOCAL, "dcgm_exporter_port": 5555}
# Lost in the first play: its facts cannot be read, its SSH refused (a loopback port nothing
# listens on), under Ansible's own strategies and Mitogen's alike.
LOST = {
    "ansible_connection": "ssh",
    "ansible_host": "127.0.0.1",
    "ansible_port": free_port(),
    "ansible_ssh_retries": 0,
}
# Nothing installed here: no package bootstrap, no node_exporter, no GPU asked for.
QUIET = {"host_bootstrap_packages": [], "dcgm_require_gpu": False, "dcgm_node_exporter": False}
NODES = [f"node-{i}" for i in range(6)]


def site_batches(broken: dict[str, dict], **kw) -> tuple[RunResult, list[str]]:
    hosts = {n: dict(broken.get(n, LOCAL)) for n in NODES}
    inv = {"all": {"vars": {}, "children": {"gpu_nodes": {"children": {"ng_a": {"hosts": hosts}}}}}}
    lines: list[str] = []
    result = run_playbook(
        with_access(inv, {}), tags=["dcgm"], extravars=QUIET, out=lines.append, **kw
    )
    return result, lines


PORT = (
    "dcgm : Preflight | The version and port are usable: dcgm_version must be 3.x or 4.x (got "
    '"3.3") and dcgm_exporter_port a port other than nv-hostengine\'s 5555 (got 5555)'
)


def test_a_batch_where_too_many_nodes_failed_stops_the_run_before_the_next():
    # Batches of two: node-1 fails in the first, half of that batch, more than 25%: the
    # second batch is not started, each of its nodes saying why, the third never reached, and
    # no play after the batches runs on any node (not even the first batch's node-0).
    result, lines = site_batches({"node-1": FAILS}, batch=2, max_fail_percent=25)
    assert lines[0] == (
        "configuring 6 nodes 6 at a time, the GPU roles in batches of 2, stopping where more "
        "than 25% of a batch fails"
    )
    assert result.rc == 2 and result.stopped
    assert result.failed == ["node-1", "node-2", "node-3"]
    assert result.not_reached == ["node-4", "node-5"]
    held = {f.host: f for f in result.failures if f.task == site_playbook().batch_check}
    assert sorted(held) == ["node-2", "node-3"]
    assert held["node-2"].message == (
        "1 of the 2 nodes of the batch before this one failed or were unreachable (node-1), more "
        "than rackform_max_fail_percent (25%) allows: this batch is not started and the run "
        "stops here"
    )
    assert "== Converge the GPU nodes (batch 2)" in lines
    assert "== Converge the GPU nodes (batch 3)" not in lines
    assert "== Write the cluster's Prometheus scrape config" not in lines
    report = report_lines(result)
    assert report == [
        "1 node(s) failed:",
        f"node-1: {PORT}",
        f"2 node(s) not started: node-2, node-3: {held['node-2'].message} (no node got the "
        "plays after the batches)",
        "2 node(s) not reached, the run having stopped: node-4, node-5",
    ]


def test_the_batch_check_names_the_lost_nodes_in_the_plays_order():
    # The check's own expressions (collection/playbooks/site.yml), rendered as Ansible renders
    # them: the nodes of the batch before that were lost are named in the play's order, never a
    # set's (which changes from run to run with the hash seed: twelve names in a set's order
    # are in this one by chance once in 479 million), nor sorted.
    play = next(
        p
        for p in yaml.safe_load(paths.site().read_text(encoding="utf-8"))
        if p["name"] == "Converge the GPU nodes"
    )
    check = next(t for t in play["pre_tasks"] if t["name"].startswith("Go on only where"))
    hosts = [f"gpu-{n}" for n in (7, 3, 11, 0, 9, 5, 1, 10, 2, 8, 6, 4)]
    batch = [f"next-{n}" for n in range(12)]
    env = {
        **{k: trust_as_template(v) for k, v in check["vars"].items()},
        "rackform_batch": 12,
        "ansible_play_hosts_all": hosts + batch,
        "ansible_play_hosts": batch,  # every node of the first batch lost
        "inventory_hostname": batch[0],
    }
    lost = Templar(loader=DataLoader(), variables=env).template(
        trust_as_template("{{ _rackform_lost | join(', ') }}")
    )
    assert lost == ", ".join(hosts)


@pytest.mark.parametrize(
    ("batch", "percent"),
    [(2, 50), (3, 34), (None, 0)],  # half of 2 is not more than 50%; a third of 3 not 34%
)
def test_a_batch_within_the_limit_goes_on_and_one_failure_stops_no_other(batch, percent):
    # ...and a run in one batch (None: six nodes fit the forks) has no batch before any other,
    # so even 0% stops nothing.
    result, lines = site_batches({"node-1": FAILS}, batch=batch, max_fail_percent=percent)
    assert result.rc == 2 and not result.stopped and result.not_reached == []
    assert [str(f) for f in result.failures] == [f"node-1: {PORT}"]
    assert "== Write the cluster's Prometheus scrape config" in lines  # the plays after ran
    assert ("== Converge the GPU nodes (batch 2)" in lines) is (batch is not None)
    assert all(
        result.hosts[n].failed == 0 and result.hosts[n].ok > 5 for n in NODES if n != "node-1"
    )


def test_a_node_lost_before_the_batches_is_in_none_of_them():
    # node-1 cannot even have its facts read: it is named, and it is in no batch, so it counts
    # against none (a batch of nodes that were all lost before could never end the run).
    result, lines = site_batches({"node-1": LOST}, batch=2, max_fail_percent=0)
    assert result.rc == 4 and not result.stopped
    assert result.unreachable == ["node-1"] and result.failed == []
    assert result.failures[0].task == "Learn the host's OS and network"
    assert "== Converge the GPU nodes (batch 3)" in lines  # five nodes in batches of two
    assert "== Converge the GPU nodes (batch 4)" not in lines


def test_the_batch_is_the_fork_width_where_the_cluster_is_wider_or_one_batch():
    assert batches(2, 5, None) == 0  # the testbed's two nodes: today's one batch
    assert batches(2000, 20, None) == 20  # through the endpoint's 20 tunnels
    # Evened out: one node left over is never a batch of its own, which its failure alone
    # would end the run in (Ansible ends it where a whole batch failed).
    assert batches(21, 20, None) == 11
    assert batches(41, 20, None) == 14
    assert batches(2000, 20, 100) == 100
    assert batches(30, 20, 30) == 0  # a batch of every node is one batch


# Refuses the first N connections to a host (its file under $FLAKY_SSH_DOWN holds N; a
# negative N: every connection), then runs the remote command on this machine.
FLAKY_SSH = r"""
import fcntl, os, subprocess, sys
args = sys.argv[1:]
i = 0
while i < len(args) and args[i].startswith("-"):
    i += 2 if args[i] in ("-o", "-p", "-i", "-l", "-F", "-E") else 1
host, remote = args[i], " ".join(args[i + 1:])
with open(os.environ["FLAKY_SSH_LOG"], "a") as log:
    log.write(host + "\n")
down = os.path.join(os.environ["FLAKY_SSH_DOWN"], host)
if os.path.exists(down):
    with open(down, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        left = int(f.read() or 0)
        if left != 0:
            f.seek(0)
            f.truncate()
            f.write(str(left - 1))
            print(f"ssh: connect to host {host} port 22: Connection refused", file=sys.stderr)
            sys.exit(255)
sys.exit(subprocess.run(["/bin/sh", "-c", remote]).returncode)
"""

# What the site playbook does, in small: each node's own work, and a cluster-wide file written
# only where every node is in the run, from what each node left in the run's fact cache (as the
# scrape config reads which nodes the dcgm role skipped), in a play tagged for the runner's
# last pass.
PLAY = """
- name: Each node
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Reach the node
      ansible.builtin.command: "true"
      changed_when: false
    - name: Remember that the node was reached
      ansible.builtin.set_fact:
        demo_reached: "{{ inventory_hostname }}"
        cacheable: true

- name: The cluster's file
  hosts: gpu_nodes
  gather_facts: false
  tags: [rackform_cluster]
  tasks:
    - name: Write it from every node, where every node is in the run
      ansible.builtin.copy:
        dest: "{{ demo_file }}"
        content: "{{ ansible_play_hosts_all | map('extract', hostvars, 'demo_reached') | sort | join(',') }}"
        mode: "0644"
      delegate_to: localhost
      run_once: true
      when: ansible_play_hosts | sort == groups['gpu_nodes'] | sort
      tags: [slurm]
"""


class Flaky:
    """Hosts behind the stand-in ssh; `down`: host -> connections refused first (-1: all)."""

    def __init__(self, tmp_path: Path, monkeypatch, down: dict[str, int]):
        self.tmp = tmp_path
        self.fake = tmp_path / "ssh"
        self.fake.write_text(f"#!{sys.executable}\n{FLAKY_SSH}")
        self.fake.chmod(0o755)
        self.log = tmp_path / "ssh.log"
        self.log.touch()
        (tmp_path / "down").mkdir()
        for host, n in down.items():
            (tmp_path / "down" / host).write_text(str(n))
        monkeypatch.setenv("FLAKY_SSH_LOG", str(self.log))
        monkeypatch.setenv("FLAKY_SSH_DOWN", str(tmp_path / "down"))
        self.book = tmp_path / "site.yml"
        self.book.write_text(textwrap.dedent(PLAY))
        self.file = tmp_path / "cluster.txt"
        self.lines: list[str] = []
        self.marks: list[int] = []  # connections made before each line the run printed

    def inventory(self, names: list[str]) -> dict:
        hosts = {
            n: {"ansible_host": n, "ansible_connection": "ssh", "ansible_ssh_retries": 0,
                "ansible_ssh_executable": str(self.fake),
                "ansible_python_interpreter": sys.executable}
            for n in names
        }  # fmt: skip
        return {
            "all": {"vars": {}, "children": {"gpu_nodes": {"children": {"ng": {"hosts": hosts}}}}}
        }

    def out(self, line: str) -> None:
        self.lines.append(line)
        self.marks.append(len(self.connections()))

    def connections(self) -> list[str]:
        return self.log.read_text().splitlines()

    def after(self, prefix: str) -> list[str]:
        """The hosts connected to after the run first printed a line starting with `prefix`."""
        at = next(i for i, line in enumerate(self.lines) if line.startswith(prefix))
        return self.connections()[self.marks[at] :]

    def run(self, names: list[str], **kw) -> RunResult:
        return run(
            self.inventory(names), {"demo_file": str(self.file)}, playbook=self.book,
            out=self.out, retry_wait_s=0.1, **kw,
        )  # fmt: skip


def test_a_node_unreachable_at_first_is_tried_again_alone_and_then_the_cluster_is_whole(
    tmp_path, monkeypatch
):
    flaky = Flaky(tmp_path, monkeypatch, {"flaky-1": 1})
    result = flaky.run(["good-1", "good-2", "flaky-1"], retries=2)
    assert result.rc == 0 and result.status == "successful", flaky.lines
    assert result.failures == [] and result.unreachable == [] and result.retries == 1
    assert (
        "1 node(s) unreachable (flaky-1): trying them again in 0.1 s, limited to them "
        "(retry 1 of 2)"
    ) in flaky.lines
    assert "retry 1 of 2: flaky-1 converged" in flaky.lines
    # The retry reached flaky-1 alone; no node was tried a second time.
    assert set(flaky.after("1 node(s) unreachable")) == {"flaky-1"}
    # Then the cluster-wide plays ran once more over every node: the file lists all three,
    # the two good nodes known from the first pass's facts alone (that pass ran no task of the
    # first play on them, and the first pass itself left the file unwritten without flaky-1).
    assert any(
        line.startswith("every node converged: the cluster-wide plays") for line in flaky.lines
    )
    assert flaky.file.read_text() == "flaky-1,good-1,good-2"
    assert result.hosts["flaky-1"].unreachable == 0 and result.hosts["flaky-1"].ok > 0
    assert report_lines(result) == []


def test_a_node_that_stays_unreachable_is_named_after_its_retries_and_the_others_finish(
    tmp_path, monkeypatch
):
    flaky = Flaky(tmp_path, monkeypatch, {"flaky-1": 1, "dead-1": -1})
    result = flaky.run(["good-1", "flaky-1", "dead-1"], retries=2)
    assert result.rc == 4, flaky.lines  # ansible-playbook's status for unreachable hosts
    assert result.unreachable == ["dead-1"] and result.failed == [] and result.retries == 2
    assert "retry 1 of 2: flaky-1 converged; still unreachable: dead-1" in flaky.lines
    assert "retry 2 of 2: none came back; still unreachable: dead-1" in flaky.lines
    assert set(flaky.after("2 node(s) unreachable")) == {"flaky-1", "dead-1"}
    assert set(flaky.after("1 node(s) unreachable (dead-1)")) == {"dead-1"}
    # The cluster is not whole: its file is left as it was (here: never written), and there is
    # no last pass over every node.
    assert not flaky.file.exists()
    assert not any(line.startswith("every node converged") for line in flaky.lines)
    assert result.hosts["good-1"].failed == 0 and result.hosts["flaky-1"].unreachable == 0
    report = report_lines(result)
    assert report[0] == "1 node(s) unreachable after 2 retries:"
    assert report[1].startswith("dead-1: UNREACHABLE at Reach the node: ")
    assert "Connection refused" in report[1] and len(report) == 2


def test_without_retries_an_unreachable_node_is_named_at_once(tmp_path, monkeypatch):
    flaky = Flaky(tmp_path, monkeypatch, {"flaky-1": 1})
    with pytest.raises(ConfigureFailed) as failed:
        configure(
            inventory=flaky.inventory(["good-1", "flaky-1"]), group_vars={"demo_file": "x"},
            playbook=flaky.book, out=flaky.out, retries=0,
        )  # fmt: skip
    assert str(failed.value).startswith(
        "configure failed: 1 node(s) unreachable: flaky-1: UNREACHABLE at Reach the node: "
    )
    assert flaky.connections().count("flaky-1") == 1
