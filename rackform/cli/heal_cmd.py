"""`rackform heal FILE... [--env ENV] --prometheus URL [--apply] [--json]`

Judges every node of every cluster from its telemetry: healthy, suspect, failed or unknown,
each with its evidence (the series, the value, when) and the action the blueprint's
lifecycle.health gives, within the cluster's out-of-service budget and behind its breaker. A
dry run by default; `--apply` acts: drain through Slurm, requeue,
remediate, re-validate the node alone, return it. Exit status, for cron:
  0  every node of every cluster healthy
  2  bad input, nothing done
  3  Prometheus could not answer for some cluster: nothing judged there (the reason in the JSON)
  5  some node reports no telemetry (`unknown`, never acted on); the rest healthy
  6  some node is suspect or failed (its action in the JSON)
The JSON's `exit` says which and why."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import (
    Env,
    PrometheusCa,
    PrometheusTimeout,
    PrometheusUrl,
    prepare_files,
    prometheus_client,
    user_error,
)
from rackform.evidence.statement import EvidenceError
from rackform.health.reported import Reported, load, revalidated
from rackform.health.run import ClusterHealth, exit_status, judge, warnings
from rackform.lifecycle.directory import HELP
from rackform.lifecycle.directory import state_dir as lifecycle_dir
from rackform.lifecycle.record import Store


def _render(c: ClusterHealth, applied: bool = False) -> list[str]:
    head = f"{c.source} [{c.environment}] {c.cluster} ({c.target})"
    if c.error:
        return [f"{head}: not judged: {c.error}"]
    b = c.breaker
    lines = [
        f"{head}: {sum(n.verdict == 'healthy' for n in c.nodes)} of {len(c.nodes)} nodes healthy;"
        f" out-of-service budget {c.budget}"
        + ("" if c.declared else "; no lifecycle.health: report only")
    ]
    if b is not None and b.tripped:
        lines.append(f"  BREAKER: {b.why}")
    for n in c.nodes:
        if n.verdict == "healthy":
            continue
        does = (
            "never acted on (no telemetry)"
            if n.verdict == "unknown"
            else (n.action if applied else f"would {n.action} (dry run)") if n.acts
            else n.action if n.action == "monitor"
            else f"{n.action} waits: {n.waits}"
        )  # fmt: skip
        lines.append(f"  node {n.node} ({n.group}): {n.verdict}: {does}")
        lines += [f"    - {e.detail}" for e in n.evidence]
    return lines


def _reported(paths: list[Path], stacks: list[str]) -> dict[str, Reported]:
    """Each saved validation statement by its stack; a file that is no statement, or one of a
    stack none of the blueprints makes, is a user's mistake (exit 2, nothing judged)."""
    out: dict[str, Reported] = {}
    for path in paths:
        try:
            rep = load(path)
        except EvidenceError as exc:
            raise user_error(str(exc)) from None
        if rep.stack not in stacks:
            raise user_error(
                f"{path}: the validation of stack {rep.stack}, which none of the blueprints"
                f" makes (they make {', '.join(stacks) or 'none'})"
            )
        if rep.stack in out:
            raise user_error(
                f"{path}: a second validation of stack {rep.stack} ({out[rep.stack].source})"
            )
        out[rep.stack] = rep
    return out


@app.command()
def heal(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    prometheus: PrometheusUrl,
    env: Env = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    timeout: PrometheusTimeout = 30.0,
    ca: PrometheusCa = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Act: drain each node heal acts on through Slurm, requeue its jobs, remediate it, re-validate it alone and return it on a passing report.",
        ),
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help=f"Where heal's record, the audit log and the lock are: the lifecycle's state directory, shared with rolling changes and reap ({HELP}).",
        ),
    ] = None,
    private_key: Annotated[
        Path | None,
        typer.Option("--private-key", help="SSH key for the Slurm controller and the nodes."),
    ] = None,
    known_hosts: Annotated[
        Path | None,
        typer.Option("--known-hosts", help="known_hosts file for the controller and the nodes."),
    ] = None,
    report_dir: Annotated[
        Path, typer.Option("--report-dir", help="Where re-validation reports are fetched.")
    ] = Path("reports"),
    evidence: Annotated[
        list[Path] | None,
        typer.Option(
            "--evidence",
            help="A cluster's last validation (its stack's `evidence` output, saved with `pulumi stack output evidence --json`); repeat for several. A node slower than its group there is a performance fault, one that failed another check a validation fault, unless rackform re-validated it since.",
        ),
    ] = None,
) -> None:
    """Judge each node of GPU clusters from DCGM and node telemetry in Prometheus (XID errors,
    uncorrectable ECC and row remaps, missing GPUs, PCIe replays, throttling, the checkpoint
    array, InfiniBand ports, the job's heartbeat) and say what lifecycle.health would do,
    within the out-of-service budget and behind the breaker. A node without telemetry is
    unknown, never acted on. Dry run: nothing is done."""
    prom = prometheus_client(prometheus, timeout, ca)
    prepared = [p for _, ps in prepare_files(files, env) for p in ps]
    reported = _reported(evidence or [], [p.plan.stack for p in prepared])
    at = time.time()
    actions: dict[int, tuple[list, str]] = {}
    if apply:
        from rackform.cli.heal_apply import Access, heal_cluster

        access = Access(state_dir, private_key, known_hosts, report_dir)
        say = (lambda _line: None) if as_json else typer.echo
        clusters = []
        for i, p in enumerate(prepared):
            ch, done, held = heal_cluster(p, prom, at, access, say, reported.get(p.plan.stack))
            clusters.append(ch)
            actions[i] = (done, held)
    else:
        clusters = []
        for p in prepared:
            rep = reported.get(p.plan.stack)
            since = revalidated(Store(lifecycle_dir(state_dir), p.plan.stack)) if rep else None
            clusters.append(judge(p, prom, at, reported=rep, since=since))
    code, why = exit_status(clusters)
    said = warnings(clusters)
    for line in said:
        print(f"rackform: warning: {line}", file=sys.stderr)
    if as_json:
        docs = [c.as_json() for c in clusters]
        for i, (done, held) in actions.items():
            docs[i]["actions"] = [o.as_json() for o in done]
            if held:
                docs[i]["not_acted_on"] = held
        doc = {
            "applied": apply,
            "exit": {"status": code, "reason": why},
            "warnings": said,
            "clusters": docs,
        }
        typer.echo(json.dumps(doc, indent=2))
    else:
        for i, c in enumerate(clusters):
            for line in _render(c, apply):
                typer.echo(line)
            done, held = actions.get(i, ([], ""))
            for o in done:
                typer.echo(f"  {o.node}: {o.action}: {o.status}" + (f": {o.why}" if o.why else ""))
                for line in o.job_lines():
                    typer.echo(f"    {line}")
            if held:
                typer.echo(f"  not acted on: {held}")
        if code:
            print(f"rackform: exit {code}: {why}", file=sys.stderr)
    if code:
        raise typer.Exit(code)
