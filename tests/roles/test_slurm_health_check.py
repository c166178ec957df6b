"""Slurm's HealthCheckProgram as the slurm role writes it (its template rendered by Ansible's
templar), run as slurmd runs it, against the local Slurm (tests/slurm_local.py), with the real
quick host checks (validators.hostcheck --quick) from this checkout: a node that fails them
drains itself with the failed checks as the reason; one it drained returns once they pass; a
node a person drained is never returned nor relabelled; checks that hang past their limit
drain the node; a node without the checks' Python changes nothing. The GPU checks find no
driver here; the checkpoint mount is what fails or passes (a plain directory, or `/`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from gpu_collection import ROLES_DIR
from slurm_local import NODES

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROLES_DIR / "slurm"
NODE = NODES[0]


def render(name: str, **variables) -> str:
    loader = DataLoader()
    v = {
        **loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True),
        **loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True),
        "inventory_hostname": NODE,
        "ansible_managed": "Ansible managed",
        **variables,
    }
    text = (ROLE / "templates" / name).read_text(encoding="utf-8")
    return Templar(loader=loader, variables=v).template(trust_as_template(text))


def health(slurm, tmp_path: Path, mount: str, **variables) -> subprocess.CompletedProcess:
    script = tmp_path / "health_check.sh"
    (tmp_path / "textfile").mkdir(exist_ok=True)
    script.write_text(
        render(
            "health_check.sh.j2",
            slurm_health_check_python=variables.pop("python", sys.executable),
            slurm_health_check_validators=str(ROOT),
            slurm_checkpoint_dir=mount,
            _slurm_health_report=str(tmp_path / "health.json"),
            slurm_health_check_textfile=str(tmp_path / "textfile" / "rackform-health.prom"),
            **variables,
        )
    )
    script.chmod(0o755)
    env = {**os.environ, **slurm.env}
    return subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=120)


def state(slurm) -> tuple[str, str]:
    """The node's state ('*', slurmd slow to answer on a busy machine, dropped) and reason (one
    line: sinfo prints the node once per partition)."""
    out = slurm.run("sinfo", "--noheader", "--Node", f"--nodes={NODE}", "--format=%T|%E").stdout
    s, _, reason = out.strip().splitlines()[0].partition("|")
    return s.rstrip("*"), reason


def exported(tmp_path: Path) -> list[str]:
    """The failed checks the script left for node_exporter's textfile collector."""
    text = (tmp_path / "textfile" / "rackform-health.prom").read_text()
    assert re.search(r"^rackform_node_checks_timestamp_seconds \d+$", text, re.M), text
    return re.findall(r'^rackform_node_check_failed\{check="([^"]+)"\} 1$', text, re.M)


def test_a_node_that_fails_drains_and_returns_once_it_passes(slurm, tmp_path):
    done = health(slurm, tmp_path, str(tmp_path))  # a plain directory: no mount there
    assert done.returncode == 0, done.stderr
    s, reason = state(slurm)
    assert s.startswith("drain"), (s, reason)
    assert reason.startswith("rackform health: checkpoint_mount (") and str(tmp_path) in reason
    # What heal reads through node_exporter: the failed check.
    assert exported(tmp_path) == ["checkpoint_mount"]
    # The array is back (here: a mount point): the node it drained returns, nothing failed.
    assert health(slurm, tmp_path, "/").returncode == 0
    assert state(slurm) == ("idle", "none")
    assert exported(tmp_path) == []


def test_a_node_a_person_drained_is_left_as_it_is(slurm, tmp_path):
    slurm.run("scontrol", "update", f"nodename={NODE}", "state=drain", "reason=ops: cable swap")
    health(slurm, tmp_path, "/")  # passes: still the person's
    assert state(slurm) == ("drained", "ops: cable swap")
    health(slurm, tmp_path, str(tmp_path))  # fails: not relabelled
    assert state(slurm) == ("drained", "ops: cable swap")


def test_checks_that_hang_drain_the_node(slurm, tmp_path):
    stuck = tmp_path / "python"
    stuck.write_text("#!/bin/sh\nsleep 30\n")
    stuck.chmod(0o755)
    health(slurm, tmp_path, "/", python=str(stuck), slurm_health_check_timeout_s=2)
    s, reason = state(slurm)
    assert s.startswith("drain") and reason == "rackform health: the checks did not finish in 2 s"


def test_a_node_without_the_checks_changes_nothing(slurm, tmp_path):
    done = health(slurm, tmp_path, str(tmp_path), python=str(tmp_path / "no-venv" / "python"))
    assert done.returncode == 0 and state(slurm)[0] == "idle"


def slurm_conf(**variables) -> str:
    """The role's slurm.conf for a cluster of no nodes (the health check's lines are what is
    read)."""
    return render(
        "slurm.conf.j2",
        slurm_cluster_name="c",
        slurm_controller=NODE,
        slurm_nodes=[],
        slurm_partitions=[],
        hostvars={NODE: {"_slurm_node": {"address": "10.0.0.1", "hostname": NODE}}},
        **variables,
    )


@pytest.mark.parametrize(("interval", "lines"), [(300, 3), (0, 0)])
def test_slurm_runs_it_every_interval_or_not_at_all(interval, lines):
    conf = slurm_conf(slurm_health_check_interval_s=interval)
    found = [ln for ln in conf.splitlines() if ln.startswith("HealthCheck")]
    assert len(found) == lines, found
    # Without the health check the prolog runs none, and a failed prolog keeps Slurm's default.
    assert ("SchedulerParameters=nohold_on_prolog_fail" in conf) == bool(lines)
    if lines:
        assert found == [
            "HealthCheckProgram=/etc/slurm/health_check.sh",
            f"HealthCheckInterval={interval}",
            "HealthCheckNodeState=ANY,CYCLE",
        ]


def test_a_job_whose_node_fails_the_prolog_checks_is_requeued_to_the_other(tmp_path):
    """Slurm runs the role's prolog (the checks with --prolog) before a job's first step: the
    node whose checks fail drains itself, and the job, requeued (not held: the role's
    SchedulerParameters), runs on the other node. A Slurm of its own (slurm_local.start) whose
    Prolog picks each node's rendered prolog: slurm-a-0's checkpoint directory is a plain
    directory (fails), slurm-a-1's is `/` (passes). Two whole-node jobs at once: one of them
    starts on slurm-a-0."""
    from slurm_local import NODES, start

    conf = slurm_conf()
    sched = [ln for ln in conf.splitlines() if ln.startswith("SchedulerParameters=")]
    assert sched == ["SchedulerParameters=nohold_on_prolog_fail"], conf
    for node, mount in ((NODES[0], str(tmp_path)), (NODES[1], "/")):
        d = tmp_path / node
        d.mkdir()
        check, prolog = d / "health_check.sh", d / "prolog.sh"
        common = {"inventory_hostname": node, "_slurm_health_check": str(check)}
        check.write_text(
            render(
                "health_check.sh.j2",
                slurm_health_check_python=sys.executable,
                slurm_health_check_validators=str(ROOT),
                slurm_checkpoint_dir=mount,
                _slurm_health_report=str(d / "health.json"),
                slurm_health_check_textfile=str(d / "health.prom"),
                **common,
            )
        )
        prolog.write_text(render("prolog.sh.j2", _slurm_job_dir=str(d / "jobs"), **common))
        assert f"{check} --prolog" in prolog.read_text()
        for f in (check, prolog):
            f.chmod(0o755)
    either = tmp_path / "prolog.sh"
    either.write_text(f'#!/bin/sh\nexec "{tmp_path}/$SLURMD_NODENAME/prolog.sh"\n')
    either.chmod(0o755)
    slurm = start(tmp_path / "slurm", extra_conf=f"Prolog={either}\n{sched[0]}\n")
    try:
        jobs = [slurm.sbatch("--exclusive", "--nodes=1", "--wrap=sleep 1") for _ in range(2)]

        def ended() -> str | None:  # a job's record goes from squeue 2 s after it ends
            ran = slurm.jobcomp.read_text() if slurm.jobcomp.exists() else ""
            done = [f"JobId={j} " for j in jobs]
            ok = all(any(ln.startswith(d) and "JobState=COMPLETED" in ln
                         for ln in ran.splitlines()) for d in done)  # fmt: skip
            return ran if ok else None

        ran = slurm.wait(ended, 90, every=1)
        assert ran, (slurm.run("squeue", check=False).stdout, slurm.log())
        s, reason = (
            slurm.run("sinfo", "-h", "-N", f"--nodes={NODES[0]}", "--format=%T|%E")
            .stdout.strip().splitlines()[0].split("|")
        )  # fmt: skip
    finally:
        slurm.shutdown()
    assert s.rstrip("*").startswith("drain"), (s, reason)
    assert reason.startswith("rackform health: checkpoint_mount (") and str(tmp_path) in reason
    for j in jobs:
        last = [ln for ln in ran.splitlines() if ln.startswith(f"JobId={j} ")][-1]
        assert "JobState=COMPLETED" in last and f"NodeList={NODES[1]}" in last, ran
    # Each job's checkpoint directory, made by the prolog where it ran.
    assert sorted(p.name for p in (tmp_path / NODES[1] / "jobs").iterdir()) == sorted(jobs)
