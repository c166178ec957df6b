"""The running world's registry: what each target adds to the stack, Ansible and the reaper,
by its `type`."""

from __future__ import annotations

from rackform.reap.target import Reaper
from rackform.targets.aws.runtime import RUNTIME as AWS
from rackform.targets.bare_metal.runtime import RUNTIME as BARE_METAL
from rackform.targets.colocation.runtime import RUNTIME as COLOCATION
from rackform.targets.runtime import TargetRuntime

RUNTIMES: dict[str, TargetRuntime] = {r.type: r for r in (AWS, BARE_METAL, COLOCATION)}


def runtime(target_type: str) -> TargetRuntime:
    return RUNTIMES[target_type]


def reaper(target_type: str) -> Reaper:
    """What carries out `rackform reap`'s actions on a cluster of this target."""
    return RUNTIMES[target_type].reaper()
