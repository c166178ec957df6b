"""Hosts that already exist (bare metal, colocation), registered through a Python dynamic
provider: no plugin binary, only `ssh`.

create checks that the host answers over SSH and records its facts (GPUs, NVMe drives, OS);
read probes again, so `pulumi refresh` shows drift (a GPU gone, a drive replaced); delete only
releases the registration: it never runs anything on the host and never touches its disks.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING, Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from rackform.plan.targets.onprem.replaces import IDENTITY
from rackform.scheduler.remote import ssh_argv

SSH_TIMEOUT_S = 10
PROBE_TIMEOUT_S = 60

# POSIX sh, read-only: the host's name, OS, NVIDIA GPUs from PCI (so they count before a driver
# is installed) with names from nvidia-smi when it exists, and NVMe namespaces with their serials
# (names like nvme0n1 are assigned in probe order; serials identify a drive).
PROBE = r"""
set -u
echo "hostname=$(hostname)"
echo "kernel=$(uname -r)"
if [ -r /etc/os-release ]; then . /etc/os-release; echo "os=${ID:-unknown} ${VERSION_ID:-}"; fi
for d in /sys/bus/pci/devices/*; do
  [ -r "$d/vendor" ] || continue
  case "$(cat "$d/vendor"):$(cat "$d/class")" in
    0x10de:0x0300*|0x10de:0x0302*) echo "gpu_pci=$(basename "$d")|$(cat "$d/device")" ;;
  esac
done
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | while IFS= read -r n; do
    echo "gpu_name=$n"
  done
fi
for b in /sys/block/nvme*; do
  [ -e "$b/size" ] || continue
  n=$(basename "$b")
  case "$n" in *c*) continue ;; esac
  s=$(tr -d ' ' < "$b/device/serial" 2>/dev/null || true)
  m=$(sed 's/ *$//' < "$b/device/model" 2>/dev/null || true)
  echo "nvme=$n|$s|$(( $(cat "$b/size") * 512 ))|$m"
done
"""

INPUTS = ("name", "address", "port", "user", "rack", "site", "gpu", "gpus_per_node", "nvme")


class HostUnreachable(Exception):
    """The host did not answer over SSH."""


def parse_facts(text: str) -> dict[str, Any]:
    """The probe's `key=value` lines -> facts. Unknown keys are ignored (newer probes)."""
    facts: dict[str, Any] = {"hostname": "", "kernel": "", "os": ""}
    pci, names, drives = [], [], []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in ("hostname", "kernel", "os"):
            facts[key] = value.strip()
        elif key == "gpu_pci":
            addr, _, device = value.partition("|")
            pci.append({"pci": addr, "device": device})
        elif key == "gpu_name":
            names.append(value.strip())
        elif key == "nvme":
            name, serial, size, model = (*value.split("|"), "", "", "")[:4]
            gb = round(int(size) / 1e9, 1) if size.isdigit() else None
            drives.append({"name": name, "serial": serial, "size_gb": gb, "model": model})
    facts["gpu_count"] = max(len(pci), len(names))
    facts["gpu_model"] = names[0] if names else (f"pci {pci[0]['device']}" if pci else None)
    facts["gpu_pci"] = sorted(p["pci"] for p in pci)
    facts["nvme"] = sorted(drives, key=lambda d: (d["serial"], d["name"]))
    return facts


def probe(user: str, address: str, port: int) -> dict[str, Any]:
    """Run the probe on the host over SSH (BatchMode: keys or agent, never a password prompt)."""
    ssh = shutil.which("ssh")
    if ssh is None:
        raise HostUnreachable("no `ssh` client on PATH; install openssh-client")
    options = [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={SSH_TIMEOUT_S}",
        "-o", "StrictHostKeyChecking=accept-new",
    ]  # fmt: skip
    cmd = [ssh, *ssh_argv(user, address, port, options, ("sh", "-s"))[1:]]
    try:
        done = subprocess.run(
            cmd, input=PROBE, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise HostUnreachable(
            f"{user}@{address}:{port} did not finish the probe in {PROBE_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"ssh exited {done.returncode}"])[-1]
        raise HostUnreachable(f"{user}@{address}:{port} is not reachable over SSH: {why}")
    return parse_facts(done.stdout)


def host_id(props: dict[str, Any]) -> str:
    return f"{props['name']}@{props['address']}:{props['port']}"


class HostProvider(ResourceProvider):
    """CRUD for a registered host. The probe is an attribute so a test can give another one."""

    serialize_as_secret_always = False  # the provider captures nothing secret

    def __init__(self, probe_fn=probe):
        super().__init__()
        self.probe_fn = probe_fn

    def _outs(self, props: dict[str, Any]) -> dict[str, Any]:
        facts = self.probe_fn(props["user"], props["address"], int(props["port"]))
        return {**{k: props.get(k) for k in INPUTS}, "reachable": True, "facts": facts}

    def create(self, props: dict[str, Any]) -> CreateResult:
        try:
            return CreateResult(host_id(props), self._outs(props))
        except HostUnreachable as exc:
            raise HostUnreachable(f"host {props['name']}: {exc}") from None

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        # A host that stopped answering is drift to show, not an error that stops the refresh.
        try:
            return ReadResult(id_, self._outs(props))
        except HostUnreachable:
            return ReadResult(id_, {**props, "reachable": False})

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in IDENTITY if olds.get(k) != news.get(k)]
        changed = [k for k in INPUTS if olds.get(k) != news.get(k)]
        return DiffResult(
            changes=bool(changed),
            replaces=replaces,
            stables=[],
            # Releasing a registration is harmless, and two registrations of one host are not.
            delete_before_replace=True,
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        try:
            return UpdateResult(self._outs(news))
        except HostUnreachable as exc:
            raise HostUnreachable(f"host {news['name']}: {exc}") from None

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Release the host: nothing runs on it, nothing on its disks changes."""
        return None


class Host(pulumi.dynamic.Resource, module="rackform", name="Host"):
    """A registered host: its inputs, and `facts` and `reachable`, which the provider adds, in
    its state.

    The program reads two of its outputs, `address` and `port`. They are declared for type
    checkers only: the SDK reads a resource class's annotations with typing.get_type_hints for
    every resource it registers (0.3 s of CPU in a 4,096-host plan), and only to turn a number
    a declared int back from the wire's double, which `port`'s reader does itself
    (`cluster.by_group`). An input without a value is not given at all: the wire
    leaves it out either way, and each one given is an output the SDK makes and resolves."""

    if TYPE_CHECKING:
        address: pulumi.Output[str]
        port: pulumi.Output[int]

    def __init__(
        self,
        name: str,
        props: dict[str, Any],
        provider: HostProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        unknown = sorted(set(props) - set(INPUTS))
        if unknown:
            raise ValueError(f"unknown host inputs: {', '.join(unknown)}")
        args = {k: props[k] for k in INPUTS if props.get(k) is not None}
        super().__init__(provider or HostProvider(), name, args, opts)
