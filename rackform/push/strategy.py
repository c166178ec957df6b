"""The Ansible strategy a push run uses: Mitogen for Ansible where it may, Ansible's own otherwise.

Ansible runs each task's module in a new `python3` on the host, which imports
`ansible.module_utils.basic` and the module again: on a small or emulated host most of a task's
time. Under Mitogen's strategies each host keeps one Python interpreter for the whole run over one
SSH connection, and a task's module runs in it with what it imported before still loaded; the
plays, the modules and what they do on the host are the same.

Not through a tunnel: Mitogen holds each host's connection for the whole run, where a run through
an EC2 Instance Connect Endpoint must open one connection per task (at most 20 at once, none past
the hour: `TUNNEL_SSH_ARGS` in the runner), so a tunnelled inventory keeps Ansible's own.
`RACKFORM_MITOGEN=0` turns it off for a run (e.g. to tell a Mitogen fault from a role's).

How a run gets it: Mitogen's strategy plugins on Ansible's plugin path; the plays that name no
strategy take `mitogen_linear` (Ansible's default strategy setting), and the site playbook's
plays that go at each node's own pace name theirs from `rackform_free_strategy` (its default is
Ansible's `free`, so the playbook run on its own is unchanged).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

OFF = "RACKFORM_MITOGEN"
CONNECT_TIMEOUT_S = 30


def plugins() -> Path | None:
    """Mitogen's strategy plugins directory (the `deploy` extra installs it), or None."""
    try:
        import ansible_mitogen  # deploy extra
    except ImportError:
        return None
    path = Path(ansible_mitogen.__file__).resolve().parent / "plugins" / "strategy"
    return path if (path / "mitogen_free.py").is_file() else None


def chosen(tunnelled: bool, environ: Mapping[str, str] = os.environ) -> str | None:
    """Why this run keeps Ansible's own strategies, or None where it runs under Mitogen."""
    if environ.get(OFF, "").strip().lower() in ("0", "no", "false", "off"):
        return f"{OFF} is off"
    if tunnelled:
        return "the nodes are reached through a tunnel, one connection per task"
    if plugins() is None:
        return "Mitogen for Ansible is not installed"
    return None


def settings(tunnelled: bool) -> tuple[dict[str, str], dict[str, str]]:
    """The environment and extra variables a run sets for its strategy: Mitogen's where
    `chosen` finds no reason against it, nothing otherwise."""
    if chosen(tunnelled) is not None:
        return {}, {}
    env = {
        "ANSIBLE_STRATEGY_PLUGINS": str(plugins()),
        "ANSIBLE_STRATEGY": "mitogen_linear",
        # Mitogen's connection timeout (Ansible's `timeout`, 10 s by default) covers the SSH
        # handshake and the start of its interpreter on the host, which a busy or emulated host
        # takes longer than 10 s over (seen: a testbed VM under a loaded machine, unreachable
        # three times running); Ansible's own covers the handshake alone. The user's wins.
        "ANSIBLE_TIMEOUT": os.environ.get("ANSIBLE_TIMEOUT", str(CONNECT_TIMEOUT_S)),
    }
    return env, {"rackform_free_strategy": "mitogen_free"}
