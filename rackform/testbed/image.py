"""The testbed's base image: Debian 12 built once with debootstrap and cached.

Every VM boots the same read-only raw image through its own qcow2 overlay, with the image's own
kernel and initrd passed to QEMU directly. The image holds no SSH keys and no machine-id: per-VM
identity (host keys, authorized key, private address) is set at boot from the kernel command line
by `guest/rackform-firstboot.sh`. The image is minimal: what the roles install comes from the
Debian mirror, or in the tests from a local repository (`rackform.testbed.apt`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rackform import paths

SUITE = "bookworm"
MIRROR = os.environ.get("RACKFORM_TESTBED_MIRROR", "http://deb.debian.org/debian")
SIZE = "4G"

# minbase skips Recommends, so udev, dbus and kmod are named. Nothing a role installs or needs
# pre-installed is here (not even python3-apt, which Ansible's apt module needs): the roles bring
# what they need, as they must on a host built elsewhere; the tests serve those packages from a
# local repository (`testbed.apt`), so a converge reaches nothing outside the machine.
PACKAGES = (
    "linux-image-amd64",
    "systemd-sysv",
    "udev",
    "kmod",
    "dbus",
    "openssh-server",
    "iproute2",
    "procps",
    "sudo",
    "netbase",
    "ca-certificates",
    "python3",
    "initramfs-tools",
    "iputils-ping",
)

_GUEST_FILES = {
    "rackform-firstboot.sh": ("usr/local/sbin/rackform-firstboot", 0o755),
    "rackform-firstboot.service": ("etc/systemd/system/rackform-firstboot.service", 0o644),
    "10-priv0.link": ("etc/systemd/network/10-priv0.link", 0o644),
    "10-wan0.link": ("etc/systemd/network/10-wan0.link", 0o644),
    "10-wan0.network": ("etc/systemd/network/10-wan0.network", 0o644),
    "sshd-hostkey.conf": ("etc/ssh/sshd_config.d/rackform-hostkey.conf", 0o644),
    # Testbed only: compiled code of modules imported from zips (every Ansible task's AnsiballZ)
    # is kept, so each task stops compiling ansible.module_utils again (see the module).
    "rackform_zipimport_cache.py": (
        "usr/lib/python3/dist-packages/rackform_zipimport_cache.py",
        0o644,
    ),
    "rackform-zipimport-cache.pth": (
        "usr/lib/python3/dist-packages/rackform-zipimport-cache.pth",
        0o644,
    ),
}

# Units that cost tens of seconds per boot under TCG and do nothing useful on a throwaway VM,
# or that would run apt or disk scrubs in the middle of a test.
_MASKED = (
    "e2scrub_reap.service",
    "e2scrub_all.timer",
    "nvmf-autoconnect.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "fstrim.timer",
    "mdcheck_start.timer",
    "mdcheck_continue.timer",
    "mdmonitor-oneshot.timer",
)

# What `systemctl enable` would link; done by hand so the host needs no systemd.
_LINKS = {
    "multi-user.target.wants/rackform-firstboot.service": "/etc/systemd/system/rackform-firstboot.service",
    "multi-user.target.wants/systemd-networkd.service": "/lib/systemd/system/systemd-networkd.service",
    "sockets.target.wants/systemd-networkd.socket": "/lib/systemd/system/systemd-networkd.socket",
    "dbus-org.freedesktop.network1.service": "/lib/systemd/system/systemd-networkd.service",
}


_FSTAB = "/dev/vda / ext4 rw,errors=remount-ro 0 1\n"
# QEMU boots each VM with the kernel and initrd taken from the image when it was built, never
# the guest's /boot: rebuilding the guest's initramfs (mdadm's package triggers it) changes
# nothing a VM boots, and under TCG it took 7 minutes. Testbed only: the roles do not know.
_INITRAMFS_CONF = "update_initramfs=no\nbackup_initramfs=no\n"
# dpkg syncs every file it unpacks; on a throwaway VM's emulated disk that is most of an install.
_DPKG_CONF = "force-unsafe-io\n"
# QEMU's user-mode network answers DNS at 10.0.2.3; there is no resolver daemon in the image.
_RESOLV = "nameserver 10.0.2.3\n"


def cache_dir() -> Path:
    """Where base images live: $RACKFORM_TESTBED_CACHE, else testbed/ in rackform's cache
    (rackform.paths.cache_dir: $RACKFORM_CACHE, $XDG_CACHE_HOME/rackform, ~/.cache/rackform)."""
    env = os.environ.get("RACKFORM_TESTBED_CACHE")
    return Path(env) if env else paths.cache_dir() / "testbed"


def _guest_file(name: str) -> bytes:
    return resources.files("rackform.testbed").joinpath("guest", name).read_bytes()


def recipe() -> dict:
    """Everything that decides the image's content; its hash names the cached image."""
    files = {n: hashlib.sha256(_guest_file(n)).hexdigest() for n in sorted(_GUEST_FILES)}
    return {
        "suite": SUITE,
        "mirror": MIRROR,
        "size": SIZE,
        "packages": sorted(PACKAGES),
        "files": files,
        "fstab": _FSTAB,
        "initramfs": _INITRAMFS_CONF,
        "dpkg": _DPKG_CONF,
        "resolv": _RESOLV,
        "masked": sorted(_MASKED),
        "links": _LINKS,
    }


def recipe_key() -> str:
    body = json.dumps(recipe(), sort_keys=True).encode()
    return hashlib.sha256(body).hexdigest()[:16]


@dataclass(frozen=True)
class BaseImage:
    rootfs: Path  # raw ext4 image, read-only, the backing file of every overlay
    kernel: Path
    initrd: Path
    built_s: float | None  # seconds spent building it now; None when it came from the cache

    @classmethod
    def in_dir(cls, d: Path, built_s: float | None = None) -> BaseImage:
        """The image whose files a build left in `d` (a cached image's directory)."""
        return cls(d / "rootfs.raw", d / "vmlinuz", d / "initrd.img", built_s)

    def missing(self) -> list[str]:
        """The names of the files a VM boots from that are not there."""
        return [p.name for p in (self.rootfs, self.kernel, self.initrd) if not p.is_file()]


class ImageError(RuntimeError):
    """The base image could not be built (missing tool, debootstrap failure, not root)."""


def cached_build(kind: str, key: str, build: Callable[[Path], None]) -> tuple[Path, float | None]:
    """`<cache>/<kind>-<key>`, built by `build` first unless a finished one is there (`build`
    writes its `done` marker last); building drops the builds of older recipes (a VM still
    running on one keeps its open file). Concurrent callers wait on the kind's lock instead of
    building twice. Also returns the seconds spent building now (None: it came from the cache)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{kind}-{key}"
    with open(root / f".lock-{kind}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "done").exists():
            return final, None
        start = time.monotonic()
        build(final)
        for old in root.glob(f"{kind}-*"):
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
        return final, time.monotonic() - start


def ensure_image(log: Callable[[str], None] = print) -> BaseImage:
    """The base image, built first with debootstrap if the cache has none for this recipe."""
    d, built_s = cached_build("base", recipe_key(), lambda final: _build(final, log))
    return BaseImage.in_dir(d, built_s)


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise ImageError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def _check_tools() -> None:
    if os.geteuid() != 0:
        raise ImageError("building the base image needs root (debootstrap, device nodes)")
    missing = [t for t in ("debootstrap", "mkfs.ext4") if shutil.which(t) is None]
    if missing:
        raise ImageError(
            f"missing {', '.join(missing)}; run `bash scripts/setup.sh --test` to install them"
        )


def debootstrap_build(
    final: Path,
    suite: str,
    packages: Sequence[str],
    recipe_of: dict,
    finish: Callable[[Path, Path], None],
    script: str = "",
) -> None:
    """What every cached debootstrap build does (the base image's, the Slurm root's): a minbase
    root of `suite` with `packages` in a work directory beside `final`, `finish(work, root)`
    (the build's own steps), then its recipe and the `done` marker written last and the work
    directory renamed to `final`. `script`: debootstrap's script for the suite where this
    debootstrap has none of that name (one older than the suite: Debian's suites share `sid`'s).
    Nothing is left behind when a step fails, and `final` is
    replaced only by a finished build."""
    work = final.with_name(f".build-{final.name}-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    root = work / "root"
    root.mkdir(parents=True)
    try:
        include = "--include=" + ",".join(packages)
        argv = ["debootstrap", "--variant=minbase", include, suite, str(root), MIRROR]
        _run(argv + ([script] if script else []), "debootstrap")
        finish(work, root)
        (work / "recipe.json").write_text(json.dumps(recipe_of, indent=2, sort_keys=True))
        (work / "done").write_text("")
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build(final: Path, log: Callable[[str], None]) -> None:
    _check_tools()
    t0 = time.monotonic()
    log(f"testbed: building the base image with debootstrap ({SUITE}, {len(PACKAGES)} packages)")

    def finish(work: Path, rootdir: Path) -> None:
        log(f"testbed: debootstrap took {time.monotonic() - t0:.0f} s")
        _customize(rootdir)
        kernels = sorted((rootdir / "boot").glob("vmlinuz-*"))
        initrds = sorted((rootdir / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise ImageError("debootstrap produced no kernel or initrd under /boot")
        shutil.copyfile(kernels[-1], work / "vmlinuz")
        shutil.copyfile(initrds[-1], work / "initrd.img")
        raw = work / "rootfs.raw"
        _run(
            ["mkfs.ext4", "-q", "-F", "-L", "rackform-root", "-d", str(rootdir), str(raw), SIZE],
            "mkfs.ext4",
        )
        raw.chmod(0o444)  # the backing file of every overlay: never written
        shutil.rmtree(rootdir)

    debootstrap_build(final, SUITE, PACKAGES, recipe(), finish)


def _customize(root: Path) -> None:
    for name, (rel, mode) in _GUEST_FILES.items():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(_guest_file(name))
        dest.chmod(mode)
    # Clones must not share identity: systemd makes a machine-id on first boot, and the
    # firstboot unit makes host keys.
    (root / "etc/machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/hostname").write_text("")
    (root / "etc/fstab").write_text(_FSTAB)
    (root / "etc/initramfs-tools/update-initramfs.conf").write_text(_INITRAMFS_CONF)
    (root / "etc/dpkg/dpkg.cfg.d/rackform-testbed").write_text(_DPKG_CONF)
    resolv = root / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    resolv.write_text(_RESOLV)
    for f in (root / "var/cache/apt/archives").glob("*.deb"):
        f.unlink()
    _enable(root)


def _enable(root: Path) -> None:
    for rel, target in _LINKS.items():
        link = root / "etc/systemd/system" / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    for unit in _MASKED:
        mask = root / "etc/systemd/system" / unit
        mask.unlink(missing_ok=True)
        mask.symlink_to("/dev/null")
