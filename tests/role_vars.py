"""A role's private variables (vars/main.yml) rendered as Ansible renders them, for given role
variables and play hosts, without running a play: how a role decides is tested on its own
expressions (tests import it by name: `from role_vars import render`)."""

from __future__ import annotations

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from gpu_collection import ROLES_DIR


def render(role: str, name: str, variables: dict, hosts: list[str], host: str | None = None,
           **extra) -> object:  # fmt: skip
    """`name` (an expression over the role's defaults, its vars/main.yml and `variables`) for
    `host` (the play's first) in a play over `hosts`; `extra`: facts the play would have."""
    path = ROLES_DIR / role
    defaults = yaml.safe_load((path / "defaults" / "main.yml").read_text(encoding="utf-8"))
    own = yaml.safe_load((path / "vars" / "main.yml").read_text(encoding="utf-8"))
    env = {
        **{k: v for k, v in defaults.items() if "{{" not in str(v)},
        **{k: trust_as_template(v) if isinstance(v, str) else v for k, v in own.items()},
        **variables,
        "ansible_play_hosts_all": hosts,
        # Every host still in the play (a test that loses one names the rest in `extra`).
        "ansible_play_hosts": hosts,
        "inventory_hostname": host or hosts[0],
        **extra,
    }
    return Templar(loader=DataLoader(), variables=env).template(
        trust_as_template("{{ " + name + " }}")
    )
