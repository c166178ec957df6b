"""What a push prints after its run: the per-host table, and every node it left unconfigured
with why."""

from __future__ import annotations

from rackform.push.playbook import RunResult
from rackform.push.site import site_playbook


def summary_lines(result: RunResult) -> list[str]:
    """The per-host table printed after a run (ok counts include changed, as in Ansible)."""
    head = f"{'host':<14}{'ok':>5}{'changed':>9}{'failed':>8}{'unreachable':>13}{'skipped':>9}"
    lines = [head]
    for host, s in sorted(result.hosts.items()):
        lines.append(
            f"{host:<14}{s.ok:>5}{s.changed:>9}{s.failed:>8}{s.unreachable:>13}{s.skipped:>9}"
        )
    return lines


def report_lines(result: RunResult) -> list[str]:
    """Every node the run left unconfigured, and why: each failed node as `HOST: ROLE : TASK:
    message`, each node still unreachable after its retries, and the nodes a stopped run never
    started, each group under a line that counts it. Nothing for a run that configured every
    node."""
    lines: list[str] = []
    held = [f for f in result.failures if f.task == site_playbook().batch_check]
    failed = [f for f in result.failures if not f.unreachable and f not in held]
    lost = [f for f in result.failures if f.unreachable]
    if failed:
        lines.append(f"{len({f.host for f in failed})} node(s) failed:")
        lines += [str(f) for f in failed]
    if lost:
        tried = f" after {result.retries} retr{'y' if result.retries == 1 else 'ies'}"
        lines.append(f"{len(lost)} node(s) unreachable{tried if result.retries else ''}:")
        lines += [str(f) for f in lost]
    if held:
        lines.append(
            f"{len(held)} node(s) not started: {', '.join(sorted(f.host for f in held))}: "
            f"{held[0].message} (no node got the plays after the batches)"
        )
    if result.not_reached:
        lines.append(
            f"{len(result.not_reached)} node(s) not reached, the run having stopped: "
            + ", ".join(result.not_reached)
        )
    if result.rc != 0 and not lines:
        lines.append(f"ansible-playbook exited {result.rc} ({result.status})")
    return lines
