"""A push run with real Ansible: a small playbook run on this machine over the local
connection, so progress, the per-host summary and the failures (host, role, task) are what
ansible-runner really reports."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from rackform.plan.configuring import tunnelled
from rackform.push import forks as push_forks
from rackform.push import retries
from rackform.push.access import access_files, with_access
from rackform.push.forks import available_memory_mib, forks
from rackform.push.playbook import run_playbook
from rackform.push.progress import diff_lines
from rackform.push.report import summary_lines
from rackform.push.stage import ConfigureFailed, configure

PLAY = """
- name: Try the runner
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: demo
"""
TASKS = """
- name: Explain a skip
  ansible.builtin.debug:
    msg: "demo skipped on {{ inventory_hostname }}: nothing to do"
- name: Change something
  ansible.builtin.command:
    argv: [touch, "{{ demo_file }}"]
  changed_when: true
- name: Check the variable the inventory gave
  ansible.builtin.assert:
    that: [demo_value | int == 7]
    fail_msg: "demo_value is {{ demo_value }}, not 7"
    quiet: true
"""


@pytest.fixture
def playbook(tmp_path) -> Path:
    tasks = tmp_path / "roles" / "demo" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(textwrap.dedent(TASKS))
    play = tmp_path / "site.yml"
    play.write_text(textwrap.dedent(PLAY))
    return play


def inventory(tmp_path: Path) -> dict:
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
    }
    return {
        "all": {
            "vars": {"demo_file": str(tmp_path / "touched")},
            "children": {"gpu_nodes": {"children": {"ng_a": {"hosts": {"here": local}}}}},
        }
    }


def run(tmp_path, playbook, variables, **kw):
    lines: list[str] = []
    inv = with_access(inventory(tmp_path), variables)
    result = run_playbook(inv, playbook=playbook, out=lines.append, **kw)
    return result, lines


def test_a_good_run_reports_changes_per_host_and_the_roles_messages(tmp_path, playbook):
    result, lines = run(tmp_path, playbook, {"demo_value": 7})
    assert result.rc == 0 and result.failures == [] and result.artifacts is None
    assert result.hosts["here"].changed == 1 and result.hosts["here"].failed == 0
    assert (tmp_path / "touched").exists()
    text = "\n".join(lines)
    assert "demo : Change something" in text and "here: changed" in text
    assert "here: demo skipped on here: nothing to do" in text
    table = summary_lines(result)
    assert table[1].split() == ["here", "3", "1", "0", "0", "0"]


def test_a_failure_names_host_role_and_task_and_keeps_the_event_log(tmp_path, playbook):
    result, lines = run(tmp_path, playbook, {"demo_value": 8}, keep_artifacts=tmp_path / "ev")
    assert result.rc == 2  # ansible-playbook's own exit status for a failed host
    assert [str(f) for f in result.failures] == [
        "here: demo : Check the variable the inventory gave: demo_value is 8, not 7"
    ]
    assert result.artifacts == tmp_path / "ev" and any(result.artifacts.rglob("job_events"))
    assert any("FAILED" in line for line in lines)


def test_check_mode_changes_nothing(tmp_path, playbook):
    result, _ = run(tmp_path, playbook, {"demo_value": 7}, check=True)
    assert result.rc == 0 and not (tmp_path / "touched").exists()


def test_the_pulumi_contract_raises_with_the_failures(tmp_path, playbook):
    with pytest.raises(ConfigureFailed, match="here: demo : Check the variable"):
        configure(
            inventory=inventory(tmp_path),
            group_vars={"demo_value": 1},
            playbook=playbook,
            keep_artifacts=tmp_path / "ev",
        )
    done = configure(inventory=inventory(tmp_path), group_vars={"demo_value": 7}, playbook=playbook)
    assert done["rc"] == 0 and done["changed"] == 1
    assert done["hosts"]["here"]["changed"] == 1


def test_access_settings_and_variables_land_in_the_inventory_without_touching_it():
    inv = {
        "all": {
            "vars": {"ansible_user": "root"},
            "children": {"gpu_nodes": {"children": {"ng": {"hosts": {"n1": {"x": 1}}}}}},
        }
    }
    out = with_access(inv, {"nvme_raid_level": 0}, private_key=Path("/k"), known_hosts=Path("/kh"))
    assert out["all"]["vars"] == {
        "ansible_user": "root",
        "nvme_raid_level": 0,
        "ansible_ssh_private_key_file": "/k",
        # Only the keys in that file are trusted: never a key on first use.
        "ansible_ssh_common_args": "-o UserKnownHostsFile=/kh -o StrictHostKeyChecking=yes",
    }
    assert inv["all"]["vars"] == {"ansible_user": "root"}


def test_an_inventory_that_tunnels_gets_the_proxy_command_and_the_stacks_access_files():
    inv = {
        "all": {
            "vars": {"rackform_ssh_proxy": "aws ec2-instance-connect open-tunnel --instance-id x"},
            "children": {"gpu_nodes": {"children": {}}},
        }
    }
    out = with_access(inv, {}, known_hosts=Path("/kh"))
    args = out["all"]["vars"]["ansible_ssh_common_args"]
    assert args.endswith("-o ProxyCommand='{{ rackform_ssh_proxy }}'")
    assert tunnelled(out)
    access = {"private_key": "KEY\n", "known_hosts": "* ssh-ed25519 AAAA\n"}
    with access_files(access) as files:
        assert files["private_key"].read_text() == "KEY\n"
        assert files["private_key"].stat().st_mode & 0o777 == 0o600
        assert files["known_hosts"].read_text() == "* ssh-ed25519 AAAA\n"
        where = files["private_key"].parent
    assert not where.exists()  # the key never outlives the run
    with access_files(None) as files:
        assert files == {}


def test_unknown_roles_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="unknown role"):
        retries.run({"all": {}}, {}, roles=["nvme_raid", "nope"])


def test_diffs_are_shown_as_unified_diffs():
    lines = diff_lines(
        [
            {
                "before": "A=1\n",
                "after": "A=1\nB=2\n",
                "before_header": "/etc/x",
                "after_header": "/etc/x",
            },
            {"prepared": "apt would install: foo"},
        ]
    )
    assert "+B=2" in lines and "--- /etc/x" in lines and "apt would install: foo" in lines
    assert diff_lines(None) == [] and diff_lines({}) == []


@pytest.mark.parametrize(
    ("nodes", "tunnelled", "mib", "width", "why"),
    [
        (2, False, 64 * 1024, 5, ""),  # Ansible's own default at least
        (512, False, 64 * 1024, 512, ""),  # every node at once where memory allows
        (
            512,
            False,
            8 * 1024,
            102,
            "half of the controller's 8192 MiB available, at 40 MiB a fork",
        ),
        (512, True, 64 * 1024, 20, "an EC2 Instance Connect Endpoint carries 20"),
        (512, True, 1000, 12, "half of the controller's 1000 MiB available, at 40 MiB a fork"),
        (4096, False, None, 4096, ""),  # memory unknown (not Linux): not capped
        (64, False, 100, 5, "half of the controller's 100 MiB available, at 40 MiB a fork"),
    ],
)
def test_forks_are_every_node_within_the_endpoint_and_the_controllers_memory(
    nodes, tunnelled, mib, width, why
):
    assert forks(nodes, tunnelled, mib) == (width, why)


def test_available_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemAvailable:   8388608 kB\n")
    assert available_memory_mib(str(meminfo)) == 8192
    assert available_memory_mib(str(tmp_path / "none")) is None
    meminfo.write_text("MemTotal: 1 kB\n")  # a kernel before 3.14 has no MemAvailable
    assert available_memory_mib(str(meminfo)) is None


def test_fewer_forks_than_nodes_still_reach_every_node_and_one_failure_stops_no_other(
    tmp_path, playbook, monkeypatch
):
    # A controller with 400 MiB available: 5 forks for 12 nodes. One node's variable is wrong:
    # it fails alone, named; the other eleven converge; the run said how wide it went.
    monkeypatch.setattr(push_forks, "available_memory_mib", lambda: 400)
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
    }
    hosts = {f"gpu-{i:02d}": dict(local) for i in range(12)}
    hosts["gpu-07"]["demo_value"] = 8
    inv = {
        "all": {
            "vars": {"demo_file": str(tmp_path / "touched")},
            "children": {"gpu_nodes": {"children": {"ng_a": {"hosts": hosts}}}},
        }
    }
    lines: list[str] = []
    result = run_playbook(
        with_access(inv, {"demo_value": 7}), playbook=playbook, out=lines.append,
        keep_artifacts=tmp_path / "ev",
    )  # fmt: skip
    assert lines[0] == (
        "configuring 12 nodes 5 at a time "
        "(half of the controller's 400 MiB available, at 40 MiB a fork), the GPU roles in "
        "batches of 4, stopping where more than 25% of a batch fails"
    )
    (command,) = (tmp_path / "ev").rglob("command")
    argv = json.loads(command.read_text())["command"]
    assert argv[argv.index("--forks") + 1] == "5"
    assert [str(f) for f in result.failures] == [
        "gpu-07: demo : Check the variable the inventory gave: demo_value is 8, not 7"
    ]
    assert sorted(h for h, s in result.hosts.items() if s.changed == 1 and not s.failed) == sorted(
        set(hosts) - {"gpu-07"}
    )
