"""A change to Slurm restarts its daemons in Slurm's upgrade order (slurmdbd, then slurmctld,
then slurmd: https://slurm.schedmd.com/upgrades.html), the order `rackform diff` names for such a
change (rackform/rollout/changes.py SLURM_ORDER). The role carries it out in one run over every
node: slurmdbd is restarted by a task (accounting) before the handlers flush, the handlers are
defined slurmctld before slurmd, and the Slurm play runs with Ansible's linear strategy and no
`serial`, so each handler runs on every host that asked for it before the next handler starts
(Ansible's handler documentation: handlers run in the order they are defined, not notified).
Read from the files; the restarts themselves are the Slurm e2e's to run."""

from __future__ import annotations

from pathlib import Path

import yaml

from rackform.rollout.changes import SLURM_ORDER

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "slurm"


def _names(path: Path) -> list[str]:
    return [t.get("name", "") for t in yaml.safe_load(path.read_text())]


def _run_order() -> list[str]:
    """The slurm role's tasks in the order they run (main.yml's imports expanded)."""
    out = []
    for t in yaml.safe_load((ROLE / "tasks" / "main.yml").read_text()):
        imported = t.get("ansible.builtin.import_tasks")
        out += _names(ROLE / "tasks" / imported) if imported else [t.get("name", "")]
    return out


def test_the_handlers_restart_slurmctld_before_slurmd():
    handlers = _names(ROLE / "handlers" / "main.yml")
    assert handlers.index("Restart slurmctld") < handlers.index("Restart slurmd")


def test_slurmdbd_restarts_before_the_handlers_flush():
    tasks = _run_order()
    dbd = tasks.index("Run slurmdbd (restarted where its configuration changed)")
    assert dbd < tasks.index("Apply changed configuration")  # services.yml's flush_handlers
    assert SLURM_ORDER == ("slurmdbd", "slurmctld", "slurmd")


def test_the_slurm_play_keeps_every_host_in_step():
    plays = yaml.safe_load((ROOT / "collection" / "playbooks" / "site.yml").read_text())
    (play,) = [p for p in plays if "rackform_slurm" in p["hosts"]]
    assert play.get("strategy", "linear") == "linear" and "serial" not in play, play
