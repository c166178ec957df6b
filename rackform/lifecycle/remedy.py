"""The remedies for a drained node, by action: the work maintenance does to it (its `Nodes`),
with the node's re-validation.

- reset: `nvidia-smi --gpu-reset` on the node (every GPU; it refuses while a process holds one,
  which the drain and requeue before it are for), as root through `sudo -n` where the ssh user
  is not root.
- reboot: `systemctl reboot` on the node, then its SSH answering with a new boot id
  (/proc/sys/kernel/random/boot_id), within `back_s`.
- power-cycle: Redfish ComputerSystem.Reset ForceRestart through the host's BMC, then the BMC
  reporting On and the node's SSH answering with a new boot id, within `back_s`.
- replace is not a remedy here: the node is given up, not re-validated (`replace.replace`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rackform.lifecycle.maintenance import Result
from rackform.lifecycle.outcome import ActionError
from rackform.scheduler.remote import RemoteError, Runner

BOOT_ID = "cat /proc/sys/kernel/random/boot_id\n"
ROOT = 'if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi'
RESET = f"as_root() {{ {ROOT}; }}\nas_root nvidia-smi --gpu-reset 2>&1\n"
REBOOT = f"as_root() {{ {ROOT}; }}\nas_root systemctl reboot 2>&1\n"


@dataclass
class Remedy:
    actions: Mapping[str, str]  # node -> the action taken on it
    runner: Callable[[str], Runner]  # the node's shell (SSH as the plan's user)
    bmc: Callable[[str], Any]  # the node's BMC (the target's runtime hook), or None
    validator: Callable[[Sequence[str], float], Result]
    back_s: float = 900.0
    poll_s: float = 5.0
    boot_id: str = BOOT_ID  # the script that prints the node's boot id
    sleep: Callable[[float], None] = time.sleep

    def apply(self, batch: Sequence[str], variables, reboot: bool) -> Result:
        out = [self._one(n, self.actions[n]) for n in batch]
        bad = [r.why for r in out if not r.ok]
        return Result(not bad, "; ".join(bad))

    def validate(self, batch: Sequence[str], timeout_s: float) -> Result:
        return self.validator(batch, timeout_s)

    def _one(self, node: str, action: str) -> Result:
        try:
            if action == "reset":
                return self._reset(node)
            if action == "reboot":
                return self._reboot(node)
            if action == "power-cycle":
                return self._power_cycle(node)
        except (RemoteError, ActionError) as exc:
            return Result(False, f"{node}: {action}: {exc}")
        return Result(False, f"{node}: {action} is no remediation heal carries out here")

    def _reset(self, node: str) -> Result:
        run = self.runner(node)
        done = run(RESET, (), 120)
        if done.rc != 0:
            return Result(False, f"{node}: nvidia-smi --gpu-reset failed: {done.why()}")
        return Result(True)

    def _boot_id(self, node: str) -> str | None:
        try:
            done = self.runner(node)(self.boot_id, (), 30)
        except RemoteError:
            return None
        return done.stdout.strip() if done.rc == 0 else None

    def _back(self, node: str, before: str | None, ready: Callable[[], bool]) -> bool:
        """Until `ready()` and the node answers over SSH with a boot id other than `before`
        (any boot id where `before` is None), within back_s."""
        end = time.monotonic() + self.back_s
        while time.monotonic() < end:
            if ready():
                now = self._boot_id(node)
                if now is not None and (before is None or now != before):
                    return True
            self.sleep(self.poll_s)
        return False

    def _reboot(self, node: str) -> Result:
        before = self._boot_id(node)
        if before is None:
            return Result(False, f"{node}: not answering over SSH before the reboot")
        try:
            done = self.runner(node)(REBOOT, (), 60)
            if done.rc != 0:
                return Result(False, f"{node}: systemctl reboot failed: {done.why()}")
        except RemoteError:
            pass  # the connection drops as the node goes down
        if not self._back(node, before, lambda: True):
            return Result(False, f"{node}: not back with a new boot within {self.back_s:g} s")
        return Result(True)

    def _power_cycle(self, node: str) -> Result:
        bmc = self.bmc(node)
        if bmc is None:
            return Result(False, f"{node}: power-cycle needs the host's bmc in the blueprint")
        system = bmc.system()
        before = self._boot_id(node)  # None: not answering (often why it is power-cycled)
        bmc.reset(system, "ForceRestart")

        def on() -> bool:
            try:
                return bmc.power_state(system) == "On"
            except ActionError:  # a BMC busy restarting its host may miss a poll: ask again
                return False

        if not self._back(node, before, on):
            return Result(
                False, f"{node}: not On and answering {self.back_s:g} s after ForceRestart"
            )
        return Result(True)
