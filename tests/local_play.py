"""A play of a few tasks run by the venv's own ansible-playbook over this machine's localhost
(the local connection), with the rackform.gpu collection on its path: how a role's task file is
entered with the facts a host would have given it (tests import it by name:
`from local_play import play`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from gpu_collection import COLLECTIONS_ROOT

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


def play(
    tmp_path: Path,
    tasks: list[dict],
    host: dict | None = None,
    *,
    args: tuple[str, ...] = (),
    path: list[Path] = (),
    name: str = "play",
) -> subprocess.CompletedProcess:
    """`tasks` as one play over localhost with `host`'s variables (the local connection and
    this Python unless it says otherwise); `args`: more ansible-playbook arguments (`--check`);
    `path`: directories put in front of PATH (stand-ins for a host's commands)."""
    inventory = tmp_path / f"{name}-inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {**LOCAL, **(host or {})}}}}))
    book = tmp_path / f"{name}.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_ROOT),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "PATH": os.pathsep.join([*map(str, path), os.environ.get("PATH", "")]),
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(book), *args],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def recap(done: subprocess.CompletedProcess) -> dict[str, int]:
    """The PLAY RECAP line of localhost as numbers: {"ok": .., "changed": .., "failed": ..}."""
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("localhost") and "ok=" in ln)
    return {k: int(v) for k, v in (p.split("=") for p in line.split(":", 1)[1].split())}


def output(done: subprocess.CompletedProcess) -> str:
    """What a failing assertion shows: the run's last lines."""
    return done.stdout[-4000:] + done.stderr[-2000:]
