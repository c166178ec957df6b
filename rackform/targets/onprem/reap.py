"""`rackform reap`'s actions on hosts that already exist (bare metal, colocation): power-off
through each host's BMC (Redfish), or drain. One host's failure (a BMC that refuses the
credentials, or does not answer) is that host's outcome; the others go on.

Owned hosts carry no live tags, so the blueprint's lifecycle.protect is the only protection.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from rackform.plan.model import Plan
from rackform.reap.target import Live, Outcome
from rackform.targets.onprem.host_spec import Bmc
from rackform.targets.onprem.redfish import BmcError, Redfish

DRAIN_TIMEOUT_S = 60
# Where a drained host says so: schedulers and rackform's own roles can refuse a drained node.
DRAIN_MARK = "/var/lib/rackform/drained"
# A drained host stops taking validation work: the marker, then the smoke job if one runs (its
# entry module, as the smoke_train role starts it) and DCGM's diagnostics.
DRAIN_SCRIPT = f"""set -e
mkdir -p {shlex.quote(str(Path(DRAIN_MARK).parent))}
printf 'drained by rackform reap: %s\\n' "$1" > {shlex.quote(DRAIN_MARK)}
pkill -TERM -f 'validators[.]smoke' || true
pkill -TERM -f 'dcgmi diag' || true
echo drained
"""


class OnPremReaper:
    def live(self, plan: Plan) -> Live:
        return Live(detail="no live tags on owned hosts: lifecycle.protect decides")

    def act(self, plan: Plan, action: str) -> list[Outcome]:
        hosts = [h for _, g in plan.gpu_groups for h in g.hosts]
        base = Path(plan.source).parent
        if action == "power-off":
            # The plan's hosts carry what configuring them needs; the BMC is the blueprint's.
            bmcs = {h.name: h.bmc for g in plan.effective.blueprint.node_groups for h in g.hosts}
            return [_power_off(h.name, bmcs.get(h.name), base) for h in hosts]
        if action == "drain":
            return [_drain(plan.ssh_user, h, f"{plan.name}/{plan.environment}") for h in hosts]
        raise ValueError(f"{action} is not an on-prem idle action")


def _power_off(name: str, bmc: Bmc | None, base: Path) -> Outcome:
    if bmc is None:  # the schema asks for one with power-off
        return Outcome(name, False, "no bmc in the blueprint")
    try:
        return Outcome(name, True, Redfish(bmc, base).power_off())
    except BmcError as exc:
        return Outcome(name, False, str(exc))


def _drain(user: str, host, why: str) -> Outcome:
    ssh = shutil.which("ssh")
    if ssh is None:
        return Outcome(host.name, False, "no `ssh` client on PATH; install openssh-client")
    cmd = [
        ssh,
        "-o", "BatchMode=yes",
        "-o", "ConnectTimeout=15",
        "-p", str(host.port),
        f"{user}@{host.address}",
        "sh", "-s", "--", shlex.quote(why),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            cmd, input=DRAIN_SCRIPT, capture_output=True, text=True, timeout=DRAIN_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return Outcome(host.name, False, f"drain did not finish in {DRAIN_TIMEOUT_S} s")
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"ssh exited {done.returncode}"])[-1]
        return Outcome(host.name, False, f"drain failed: {why}")
    return Outcome(host.name, True, f"drained ({DRAIN_MARK})")
