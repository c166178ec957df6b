"""A node disk image for bare metal and colocation, baked on a testbed VM: one VM boots from a
base image (the testbed's Debian 12 by default), fetches the bake's artifact from this machine
(served on loopback), runs the bake script (`boot.bake`) in it (the site playbook's baked tags;
a reboot where the roles ask for one, then the
converge again), records what it baked in /etc/rackform/image.json and is shut down; its root
drive, flattened, is the image.

The output directory holds a partition image, as PXE and Ironic's partition images take one: the
root filesystem (`rootfs.qcow2` and/or `rootfs.raw`, the whole disk one ext4 filesystem) with
the kernel and initrd beside it (`vmlinuz`, `initrd.img`), and `image.json`: the record baked
in, the artifact it was built from, the base image, and each file's sha256. The testbed boots
such a directory as it boots its own images (`rackform testbed up --image DIR`).

A build goes to a directory of its own beside the output and replaces the output only once it
has finished: a build that fails leaves the previous image as it was. The same artifact on the
same base image is not built again (`image.json` says so).

Identity is taken out before the drive is kept, as the testbed's own images have none: the
machine id, the SSH host keys (the image's first-boot unit makes new ones), the host name, the
bake's bootstrap log; and apt's downloaded packages and package lists (the lists read as never
updated, so a node's first apt task reads its own sources). Where the build was given its own
apt source, the base's sources are put back.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rackform.testbed import lifecycle, vm
from rackform.testbed.image import BaseImage
from rackform.testbed.ssh import SshError

FORMATS = ("qcow2", "raw")
MANIFEST = "image.json"
GUEST_HOST = "10.0.2.2"  # this machine's loopback, from a guest on QEMU's user network
BAKE_SCRIPT = Path(__file__).resolve().parents[1] / "boot" / "bake.py"
ON_GUEST = "/opt/rackform/bake.py"
# Written by the nvidia_driver role under a local connection (`boot.bake`).
REBOOT_REQUEST = "/var/lib/rackform/image-reboot-requested"
CONVERGE_TIMEOUT_S = 7200.0
BUILD_LOG = (
    "/var/log/rackform-image-build.log"  # the bake's output, on the builder and in the image
)

_SAVE_SOURCES = (
    "mkdir -p /var/lib/rackform/image-apt && cp -a /etc/apt/sources.list"
    " /etc/apt/sources.list.d /var/lib/rackform/image-apt/ 2>/dev/null;"
    " rm -f /etc/apt/sources.list.d/*; printf '%s\\n' {line} > /etc/apt/sources.list;"
    " find /var/lib/apt/lists -maxdepth 1 -type f -delete"
)
_RESTORE_SOURCES = (
    "rm -rf /etc/apt/sources.list.d; cp -a /var/lib/rackform/image-apt/sources.list"
    " /var/lib/rackform/image-apt/sources.list.d /etc/apt/ 2>/dev/null;"
    " rm -rf /var/lib/rackform/image-apt"
)
# What makes one machine itself; the image's first boot makes its own (rackform-firstboot).
_FORGET = (
    "apt-get clean; rm -f /etc/ssh/ssh_host_* /var/lib/dbus/machine-id; : > /etc/machine-id;"
    f" : > /etc/hostname; rm -f {ON_GUEST}"
    # The bake's own bootstrap log and state are the builder's, not a node's.
    " /var/log/rackform-bootstrap.log /var/lib/rackform/bootstrap*.json;"
    # No package lists, and none read as fresh: the roles' apt tasks update a cache older than
    # their cache_valid_time, and a node booted from the image soon after the bake would
    # otherwise take the bake's update for its own and find no package at all.
    " find /var/lib/apt/lists -maxdepth 1 -type f -delete;"
    " rm -f /var/lib/apt/periodic/update-success-stamp; touch -d @0 /var/lib/apt/lists; sync"
)


class BuildError(RuntimeError):
    """The image could not be built; the previous one (if any) is left as it was."""


@dataclass(frozen=True)
class DiskImage:
    dir: Path
    manifest: dict
    built_s: float | None  # None: the output was already this image

    @property
    def record(self) -> dict:
        return self.manifest["record"]


def read_manifest(out: Path) -> dict | None:
    try:
        found = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def build(
    artifact: Path,
    sha256: str,
    out: Path,
    *,
    base: BaseImage,
    formats: tuple[str, ...] = FORMATS,
    apt_source: str | None = None,
    memory_mb: int = vm.MEMORY_MB,
    cpus: int = vm.CPUS,
    log: Callable[[str], None] = print,
) -> DiskImage:
    """Bake `artifact` (its sha256 given) into an image in `out`, from `base`."""
    unknown = sorted(set(formats) - set(FORMATS))
    if not formats or unknown:
        raise BuildError(f"formats are {', '.join(FORMATS)}, not {', '.join(unknown) or 'none'}")
    out = out.resolve()
    base_id = _base_id(base)
    found = read_manifest(out)
    if (
        found
        and found.get("artifact") == sha256
        and found.get("base") == base_id
        and all(f"rootfs.{f}" in found.get("files", {}) for f in formats)
    ):
        log(f"image: {out} is already this build (artifact {sha256[:12]}): nothing to do")
        return DiskImage(out, found, None)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-build-", dir=out.parent))
    try:
        record = _bake(artifact, sha256, work, base, apt_source, memory_mb, cpus, log)
        manifest = _write(work / "image", record, sha256, base, base_id, formats, log)
        _replace(work / "image", out)
    except (BuildError, lifecycle.TestbedError, vm.VmError, SshError, OSError) as exc:
        raise BuildError(f"the image build failed: {exc}; {out} is left as it was") from None
    except subprocess.SubprocessError as exc:  # an SSH command past its timeout
        raise BuildError(f"the image build failed: {exc}; {out} is left as it was") from None
    finally:
        lifecycle.down(work / "bed")
        shutil.rmtree(work, ignore_errors=True)
    return DiskImage(out, manifest, round(time.monotonic() - start, 1))


def _base_id(base: BaseImage) -> str:
    """The base image by its directory's name (a cache's recipe key) and its root's size and
    time: enough to tell another base, without reading gigabytes."""
    st = base.rootfs.stat()
    return f"{base.rootfs.parent.name}:{st.st_size}:{int(st.st_mtime)}"


def _bake(
    artifact: Path,
    sha256: str,
    work: Path,
    base: BaseImage,
    apt_source: str | None,
    memory_mb: int,
    cpus: int,
    log: Callable[[str], None],
) -> dict:
    bed = lifecycle.up(
        work / "bed", 1, memory_mb=memory_mb, cpus=cpus, image=base.rootfs.parent, log=log
    )
    ssh = bed.ssh("node1")
    with serving(artifact.parent) as port:
        url = f"http://{GUEST_HOST}:{port}/{artifact.name}"
        if apt_source:
            ssh.run(_SAVE_SOURCES.format(line=_quoted(apt_source)))
        ssh.run(
            f"mkdir -p {Path(ON_GUEST).parent} && cat > {ON_GUEST}",
            input=BAKE_SCRIPT.read_text(encoding="utf-8"),
        )
        for attempt in (1, 2):
            log(f"image: converging the baked roles on the builder (run {attempt})")
            with _timed(log, f"converge (run {attempt})"):
                _guest(ssh, f"python3 {ON_GUEST} converge {url} {sha256}", "the converge")
            asked = ssh.run(f"test -e {REBOOT_REQUEST}", check=False).returncode == 0
            if not asked:
                break
            if attempt == 2:
                raise BuildError("the roles asked for a reboot again after the build's reboot")
            log("image: the roles asked for a reboot; rebooting the builder")
            ssh.run(f"rm -f {REBOOT_REQUEST}")
            with _timed(log, "reboot"):
                lifecycle.reboot_and_wait(bed, ["node1"])
        _guest(ssh, f"python3 {ON_GUEST} record {url} {sha256}", "recording the image")
        record = json.loads(ssh.run("cat /etc/rackform/image.json").stdout)
    if apt_source:
        ssh.run(_RESTORE_SOURCES)
    with _timed(log, "forgetting the builder's identity and powering it off"):
        # One command: with the host keys gone, sshd takes no new connection.
        ssh.run(f"{_FORGET}; systemd-run --on-active=1 --timer-property=AccuracySec=100ms poweroff")
        d = Path(bed.nodes[0].dir)
        deadline = time.monotonic() + 300
        while vm.running_pid(d) is not None and time.monotonic() < deadline:
            time.sleep(1)
        vm.stop(d, grace_s=60.0)  # flushes where the guest did not power off in time
    return record


@contextmanager
def _timed(log: Callable[[str], None], what: str) -> Iterator[None]:
    """Logs how long `what` took once it ends (the build's steps, for anyone sizing one)."""
    start = time.monotonic()
    yield
    log(f"image: {what}: {time.monotonic() - start:.0f} s")


def _guest(ssh, command: str, what: str) -> None:
    # Kept in the image as the record of its build (`BUILD_LOG`).
    proc = ssh.run(
        f"set -o pipefail; {command} 2>&1 | tee -a {BUILD_LOG}",
        check=False,
        timeout=CONVERGE_TIMEOUT_S,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BuildError(f"{what} on the builder exited {proc.returncode}:\n{tail}")


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _write(
    d: Path,
    record: dict,
    sha256: str,
    base: BaseImage,
    base_id: str,
    formats: tuple[str, ...],
    log: Callable[[str], None],
) -> dict:
    d.mkdir()
    root = d.parent / "bed" / "node1" / "root.qcow2"
    for fmt in formats:
        log(f"image: writing rootfs.{fmt}")
        with _timed(log, f"rootfs.{fmt} written"):
            proc = subprocess.run(
                ["qemu-img", "convert", "-O", fmt, str(root), str(d / f"rootfs.{fmt}")],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
            )
        if proc.returncode != 0:
            raise BuildError(f"qemu-img convert to {fmt} failed: {proc.stderr.strip()}")
    made = BaseImage.in_dir(d)  # the file names a testbed boots from, as `testbed up --image`
    shutil.copyfile(base.kernel, made.kernel)
    shutil.copyfile(base.initrd, made.initrd)
    manifest = {
        "record": record,
        "artifact": sha256,
        "base": base_id,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with _timed(log, "checksums"):
        manifest["files"] = {p.name: _sha256(p) for p in sorted(d.iterdir())}
    (d / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    (d / "done").write_text("")
    return manifest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(functools.partial(f.read, 1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _replace(new: Path, out: Path) -> None:
    """`out` becomes `new`; the old output is removed only after the new one is in place."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}-old-{time.time_ns()}")
        out.rename(old)
    new.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving(directory: Path) -> Iterator[int]:
    """`directory` on 127.0.0.1 (a free port) for the length of the block: the artifact's, for
    the builder VM to fetch from (and a benchmark's package repository)."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
