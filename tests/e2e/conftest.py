"""The e2e's session fixtures: one testbed (two Debian VMs under QEMU), the wheel server and the
package repository, shared by every e2e file in the session, so that a later file runs on the
VMs an earlier one booted. No file relies on another having run first: each asks for the
fixtures it needs (they fill rackform's cache on first use: the testbed's image, the package
repository, the wheelhouses) and brings the VMs to the state it starts from, so the files pass
alone, on an empty cache, and in any order.
The shared helpers (`cli`, `sh`, `shown`, `blueprint`) are in tests/e2e/vms.py.

And the phase timer: each phase's time is printed when the session's tests end and again in
pytest's closing summary, just above the short test summary, where the tail of a CI log shows
it."""

from __future__ import annotations

import functools
import http.server
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from loopback import http_server
from slurm_helpers import (
    MOUNT_TMPFS,
    SLURM_VARS,
    check_formed,
    formed,
    slurm_blueprint,
    smoke_vars,
    start_imds,
    stop,
)
from vms import TORCH, booted_testbed, cli, find_torch_wheel, sh

from rackform.paths import cache_dir
from rackform.testbed import lifecycle

PHASE_LINES = pytest.StashKey[list[str]]()


class Phases:
    def __init__(self):
        self.times: list[tuple[str, float]] = []
        self.notes: list[str] = []

    @contextmanager
    def __call__(self, name: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.times.append((name, time.monotonic() - start))

    def lines(self) -> list[str]:
        total = sum(t for _, t in self.times)
        out = ["", "e2e phases (seconds):"]
        out += [f"  {t:7.1f}  {name}" for name, t in self.times]
        out += [f"  {total:7.1f}  total", *[f"  note: {n}" for n in self.notes]]
        return out


@pytest.fixture(scope="session")
def phases(request):
    p = Phases()
    yield p
    request.config.stash[PHASE_LINES] = p.lines()
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n".join(p.lines()), flush=True)


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(PHASE_LINES, None)
    if lines:
        terminalreporter.write_sep("=", lines[1].rstrip(":"))
        for line in lines[2:]:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def testbed(tmp_path_factory, phases, torch_image):
    """node1 from the base image: the first converge proves on it that the roles install what
    they need on a bare host, torch included. node2 from the baked image with torch (the roles'
    packages and smoke_train's virtualenv, installed natively when the image was built): no
    scenario is about installing them twice, and on two emulated CPUs the second install only
    slowed the first."""
    d = tmp_path_factory.mktemp("testbed")
    label = "testbed up: node1 from the base image, node2 from the baked one with torch"
    with phases("testbed: waiting for the baked image with torch (built in the background)"):
        wheelhouse = torch_image()
    boot = booted_testbed(d, 2, phases(label), baked_nodes=("node2",), wheelhouse=wheelhouse)
    with boot as bed:
        phases.notes.append(
            f"accelerator {bed.accel} ({bed.accel_why}); waited for the images"
            f" {bed.timings['image_s']} s, boot {bed.timings['boot_s']} s"
        )
        yield bed


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # one line per request on stderr otherwise
        pass


@pytest.fixture(scope="session")
def torch_wheelhouse(phases) -> Path | None:
    """torch (this machine's CPU wheel) and its dependencies for the guests' Python (3.11),
    downloaded into rackform's cache by this fixture on first use; None where this machine has
    no torch wheel. Every test that installs torch on a VM asks for it (or for wheel_server)."""
    wheel = find_torch_wheel()
    if wheel is None:
        return None
    cache = cache_dir() / f"wheelhouse-torch-{TORCH}-cp311"
    with phases("wheelhouse: torch wheel + dependencies (downloaded on first use)"):
        if not (cache / "done").exists():
            cache.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:",
                 "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                 "-d", cache, wheel, "numpy"],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            (cache / "done").write_text("")
    return cache


@pytest.fixture(scope="session", autouse=True)
def torch_image(torch_wheelhouse, phases):
    """The baked image with torch, built from the session's start in the background
    (`rackform testbed image --torch-wheelhouse`; from the baked image's tree, about a minute;
    cached after the first build): the first e2e file (the node that configures itself) keeps
    one VM busy meanwhile. The testbed's `up` waits for it (the image cache's lock) where it is
    not done yet. Called, it gives the wheelhouse to boot with (None without a torch wheel)."""
    if torch_wheelhouse is None:
        yield lambda: None
        return
    log = cache_dir() / "torch-image.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        build = subprocess.Popen(
            [sys.executable, "-m", "rackform", "testbed", "image",
             "--no-packages", "--torch-wheelhouse", torch_wheelhouse],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its debootstrap and chroot with it, if stopped early
        )  # fmt: skip

    def done() -> Path:
        rc = build.wait()
        assert rc == 0, f"building the baked image with torch failed:\n{log.read_text()[-3000:]}"
        return torch_wheelhouse

    try:
        yield done
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGTERM)
            build.wait()
        else:
            built = [ln for ln in log.read_text().splitlines() if "with torch" in ln]
            phases.notes.append(f"in the background from the session's start: {'; '.join(built)}")


@pytest.fixture(scope="session")
def wheel_server(torch_wheelhouse):
    """The torch wheelhouse served on 127.0.0.1 (None without one); the guests reach the host's
    loopback at 10.0.2.2 through QEMU's user network."""
    if torch_wheelhouse is None:
        yield None
        return
    handler = functools.partial(_QuietHandler, directory=str(torch_wheelhouse))
    with http_server(handler) as port:
        yield port


@pytest.fixture(scope="session")
def apt_repo(testbed, phases):
    """The packages the roles install, served on 127.0.0.1 as the VMs' only apt source (the
    base image holds none of them: the roles must bring what they need). The package lists the
    images were built with (Debian's mirror) go, and the lists read as never updated: a source
    just changed is what apt must read before it installs. (Left there, they were too recent
    for the slurm role's cache_valid_time on a VM of the baked image, made that hour, and apt
    knew no munge.)"""
    from rackform.testbed.apt import ensure_repo, sources_line

    with phases("local package repository (cached after the first download)"):
        repo = ensure_repo(log=lambda line: None)
    handler = functools.partial(_QuietHandler, directory=str(repo))
    with http_server(handler) as port:
        line = sources_line(port).strip()
        for node in ("node1", "node2"):
            sh(
                testbed,
                node,
                f"rm -f /etc/apt/sources.list.d/*; echo '{line}' > /etc/apt/sources.list;"
                " find /var/lib/apt/lists -maxdepth 1 -type f -delete;"
                " rm -f /var/lib/apt/periodic/update-success-stamp;"
                " touch -d @0 /var/lib/apt/lists",
            )
        yield port


@dataclass
class Cluster:
    bed: lifecycle.Testbed
    converge: list | None  # `rackform configure` arguments of this file's converge, but the roles
    first: object | None  # its CompletedProcess (None: the cluster was found formed)


@pytest.fixture(scope="module")
def cluster(testbed, apt_repo, wheel_server, phases, tmp_path_factory):
    """The VMs as the Slurm cluster (tests/e2e/slurm_helpers.py) for one e2e file (the Slurm
    e2e's, the rolling change's): the one the configure e2e formed, else formed here; each
    VM's metadata stand-in and a mounted checkpoint directory, gone again after."""
    bed, tmp = testbed, tmp_path_factory.mktemp("slurm")
    for node in ("node1", "node2"):
        start_imds(bed, node)
        sh(bed, node, MOUNT_TMPFS)
    try:
        if formed(bed):
            phases.notes.append("slurm: the cluster the configure e2e formed, used as it is")
            yield Cluster(bed, None, None)
            return
        if wheel_server is None:
            pytest.fail(f"no torch {TORCH} CPU wheel on this machine for the smoke job")
        reports = tmp / "reports"
        converge = [slurm_blueprint(bed, tmp), "--private-key", bed.key, "--known-hosts",
                    bed.known_hosts, "--report-dir", reports, *SLURM_VARS,
                    *smoke_vars(wheel_server)]  # fmt: skip
        with phases("slurm: converge slurm and smoke_train; the smoke job through Slurm"):
            first = cli("configure", *converge, "--role", "slurm", "--role", "smoke_train")
        check_formed(bed, first, reports)
        yield Cluster(bed, converge, first)
    finally:
        sh(bed, "node1", "scancel --user=root; scontrol update nodename=node1,node2 state=resume",
           check=False)  # fmt: skip
        for node in ("node1", "node2"):
            stop(bed, node)
