"""Which Ansible strategy a push run takes: Mitogen's where nothing speaks against it, Ansible's own
through a tunnel (one connection per task), with RACKFORM_MITOGEN off, or without Mitogen
installed; and a real run under each, through rackform's runner, reporting the same."""

from __future__ import annotations

import sys

import pytest

from rackform.push import strategy
from rackform.push.access import with_access
from rackform.push.playbook import run_playbook

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


def test_mitogen_is_chosen_where_nothing_speaks_against_it(monkeypatch):
    monkeypatch.delenv("ANSIBLE_TIMEOUT", raising=False)
    assert strategy.plugins() is not None  # the deploy extra installs it
    assert strategy.chosen(tunnelled=False, environ={}) is None
    env, extra = strategy.settings(tunnelled=False)
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (strategy.plugins() / "mitogen_linear.py").is_file()
    assert env["ANSIBLE_STRATEGY_PLUGINS"] == str(strategy.plugins())
    assert extra == {"rackform_free_strategy": "mitogen_free"}
    # Its connection timeout covers the interpreter's start on the host too: longer, unless the
    # user set one.
    assert env["ANSIBLE_TIMEOUT"] == "30"


def test_the_users_connection_timeout_wins(monkeypatch):
    monkeypatch.setenv("ANSIBLE_TIMEOUT", "90")
    assert strategy.settings(tunnelled=False)[0]["ANSIBLE_TIMEOUT"] == "90"


@pytest.mark.parametrize("off", ["0", "no", "False", " off "])
def test_the_environment_turns_it_off(off, monkeypatch):
    assert strategy.chosen(False, {"RACKFORM_MITOGEN": off}) == "RACKFORM_MITOGEN is off"
    monkeypatch.setenv("RACKFORM_MITOGEN", off)
    assert strategy.settings(tunnelled=False) == ({}, {})


def test_a_tunnel_keeps_ansibles_own_one_connection_per_task():
    assert "tunnel" in strategy.chosen(tunnelled=True, environ={})
    assert strategy.settings(tunnelled=True) == ({}, {})


def test_without_mitogen_installed_the_run_keeps_ansibles_own(monkeypatch):
    monkeypatch.setitem(sys.modules, "ansible_mitogen", None)  # import fails
    assert strategy.plugins() is None
    assert strategy.chosen(False, {}) == "Mitogen for Ansible is not installed"


def _inventory() -> dict:
    hosts = {"node-a": dict(LOCAL), "node-b": dict(LOCAL)}
    return {"all": {"vars": {}, "children": {"gpu_nodes": {"children": {"ng": {"hosts": hosts}}}}}}


PLAY = """
- hosts: gpu_nodes
  gather_facts: false
  strategy: "{{ rackform_free_strategy | default('free') }}"
  tasks:
    - name: Which strategy runs this play
      ansible.builtin.debug:
        msg: "{{ rackform_free_strategy | default('free') }}"
    # The module's process: Mitogen's interpreter on the host names itself in its argv
    # (`python(mitogen:...)`); Ansible's own is a new python3 for each task.
    - name: The process a module runs in
      ansible.builtin.shell: "tr '\\\\0' ' ' < /proc/$PPID/cmdline"
      register: _parent
      changed_when: true
    - name: Say which
      ansible.builtin.debug:
        msg: "{{ 'in mitogen' if '(mitogen:' in _parent.stdout else 'in python3' }}"
- hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: A module under the default strategy
      ansible.builtin.stat:
        path: /
"""


@pytest.mark.parametrize("mitogen", ["1", "0"])
def test_a_run_reports_the_same_under_either(mitogen, tmp_path, monkeypatch):
    monkeypatch.setenv("RACKFORM_MITOGEN", mitogen)
    book = tmp_path / "play.yml"
    book.write_text(PLAY)
    lines: list[str] = []
    result = run_playbook(
        with_access(_inventory(), {}),
        playbook=book,
        out=lines.append,
        keep_artifacts=tmp_path / "run",
    )
    assert result.rc == 0, lines
    assert {h: (s.ok, s.changed, s.failed) for h, s in result.hosts.items()} == {
        "node-a": (4, 1, 0),
        "node-b": (4, 1, 0),
    }
    said = sorted(line.strip().split(" (")[0] for line in lines if line.startswith("    node-"))
    named, where = ("mitogen_free", "mitogen") if mitogen == "1" else ("free", "python3")
    assert said == sorted(
        f"{h}: {x}" for h in ("node-a", "node-b") for x in (named, "changed", f"in {where}")
    )
