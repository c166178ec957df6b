"""The node side of a rolling change, through the roles: apply the new (or, rolling back, the
old) variables to one drained batch (`--limit` to its nodes, the nvidia_driver role allowed to
reboot a node whose new driver needs it), and re-validate the batch with the smoke job and host
checks on those nodes only. The batch is drained, so Slurm would start no job there: the smoke
job runs outside Slurm (torchrun over the batch's nodes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackform.hosts.runner import RunResult, run
from rackform.rollout.roll import Result


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

    def apply(self, batch: Sequence[str], variables: Mapping[str, Any], reboot: bool) -> Result:
        return _result(
            run(
                self.inventory,
                {**variables, "smoke_train_run": False},
                private_key=self.private_key,
                known_hosts=self.known_hosts,
                extravars={"nvidia_driver_reboot": reboot},
                limit=",".join(batch),
                out=self.out,
            )
        )

    def validate(self, batch: Sequence[str], timeout_s: float) -> Result:
        return _result(
            run(
                self.inventory,
                {**self.validation, "smoke_train_run": True, "smoke_train_slurm": False},
                private_key=self.private_key,
                known_hosts=self.known_hosts,
                limit=",".join(batch),
                roles=["smoke_train"],
                report_dir=self.report_dir,
                out=self.out,
                timeout_s=int(timeout_s),
            )
        )
