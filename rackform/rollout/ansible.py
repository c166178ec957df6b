"""The node side of a rolling change, through the roles: apply the new (or, rolling back, the
old) variables to one drained batch (`--limit` to its nodes, the nvidia_driver role allowed to
reboot a node whose new driver needs it), and re-validate the batch with the smoke job and host
checks on those nodes only. The batch is drained, so Slurm would start no job there: the smoke
job runs outside Slurm (torchrun over the batch's nodes).

The re-validation passes only on a passing report fetched from every node of the batch: the
role skips its job on a run over part of the cluster and where the same job's report already
exists, and a run that skipped must never read as a pass. So the batch is the job's whole
cluster (`smoke_train_cluster_hosts`, /etc/hosts left as the full converge wrote it), the job
runs again whatever report is there (`smoke_train_force`), and the reports are fetched into a
directory of this validation's own and judged by the one verdict rule (`evidence.verdict`)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackform.evidence.verdict import verdict
from rackform.lifecycle.maintenance import Result
from rackform.push.playbook import RunResult
from rackform.push.retries import run
from rackform.push.site import site_playbook


def _result(r: RunResult) -> Result:
    if r.rc == 0:
        return Result(True)
    if r.status == "timeout":
        return Result(False, f"did not finish in time ({r.seconds:.0f} s)")
    return Result(False, "; ".join(map(str, r.failures)) or f"ansible-playbook exited {r.rc}")


@dataclass
class AnsibleNodes:
    inventory: dict[str, Any]
    validation: Mapping[str, Any]  # the plan's role variables, the smoke job's included
    private_key: Path | None = None
    known_hosts: Path | None = None
    report_dir: Path | None = None
    out: Callable[[str], None] = print
    extravars: Mapping[str, Any] = field(default_factory=dict)  # --extra-vars, every run
    # The roles a batch's apply runs (the change's; empty: every role): the others' tasks
    # would only confirm what is there, at a few seconds a task on a drained node.
    roles: Sequence[str] = ()

    def apply(self, batch: Sequence[str], variables: Mapping[str, Any], reboot: bool) -> Result:
        return _result(
            run(
                self.inventory,
                {**variables, "smoke_train_run": False},
                private_key=self.private_key,
                known_hosts=self.known_hosts,
                # Extra vars win over every other variable: what the batch needs wins over them.
                extravars={
                    **self.extravars,
                    "smoke_train_run": False,
                    "nvidia_driver_reboot": reboot,
                },
                limit=",".join(batch),
                roles=self._tags(),
                out=self.out,
            )
        )

    def _tags(self) -> list[str]:
        """The change's roles as the site playbook's tags; every role where the change reaches
        one the playbook cannot run alone (host_bootstrap runs before every role)."""
        return list(self.roles) if set(self.roles) <= set(site_playbook().roles) else []

    def validate(self, batch: Sequence[str], timeout_s: float) -> Result:
        base = (self.report_dir or Path("reports")).resolve()
        base.mkdir(parents=True, exist_ok=True)
        reports = Path(tempfile.mkdtemp(prefix=f"validate-{batch[0]}-", dir=base))
        done = _result(
            run(
                self.inventory,
                self.validation,
                private_key=self.private_key,
                known_hosts=self.known_hosts,
                extravars={
                    **self.extravars,
                    **batch_job(batch),
                    "smoke_train_fetch_dir": str(reports),  # judged below: never another's
                },
                limit=",".join(batch),
                roles=["smoke_train"],
                report_dir=reports,
                out=self.out,
                timeout_s=int(timeout_s),
            )
        )
        return done if not done.ok else judge_reports(reports, batch)


def batch_job(batch: Sequence[str]) -> dict[str, Any]:
    """The smoke_train variables that make its job run over the batch alone, now."""
    return {
        "smoke_train_run": True,
        "smoke_train_slurm": False,
        "smoke_train_cluster_hosts": list(batch),
        "smoke_train_hosts_file": False,
        "smoke_train_force": True,
        # A one-node batch whose host checks fail is not worth its smoke job's minutes.
        "smoke_train_skip_job_on_host_failure": True,
    }


def judge_reports(reports: Path, batch: Sequence[str]) -> Result:
    """A pass only where every node of the batch left a passing report under `reports`
    (`<run id>/<node>.json`, as the role fetches them)."""
    bad = []
    for node in batch:
        found = sorted(reports.glob(f"*/{node}.json"))
        if not found:
            bad.append(f"{node}: no report (the smoke job did not run there)")
            continue
        try:
            ok, why = verdict(json.loads(found[-1].read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            ok, why = False, f"its report {found[-1]} cannot be read ({exc})"
        if not ok:
            bad.append(f"{node}: {why}")
    return Result(not bad, "; ".join(bad))
