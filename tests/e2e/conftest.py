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
import re
import signal
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from loopback import http_server
from slurm_helpers import (
    MOUNT_TMPFS,
    SCHEDULER,
    SLURM_VARS,
    check_formed,
    formed,
    slurm_blueprint,
    smoke_vars,
    start_imds,
    stop,
)
from vms import TORCH, booted_testbed, bootstrap_wheelhouse, cli, find_torch_wheel, sh

from rackform.paths import cache_dir
from rackform.testbed import lifecycle
from rackform.testbed.apt import sources_line

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
def testbed(tmp_path_factory, phases, node_image):
    """Both VMs from the node image the session baked (`node_image`): the suite's one converge
    from a bare image is that bake, and every scenario's VMs boot from what it made."""
    d = tmp_path_factory.mktemp("testbed")
    with phases("testbed: waiting for the node image (baked in the background)"):
        image = node_image()
    # Two vCPUs each: the scenarios' Ansible runs and smoke jobs keep a VM's emulated CPUs
    # busy, and the host's two cores have room for both VMs' second while the rest of the
    # suite, beside them, runs at a lower priority (scripts/test.sh).
    with booted_testbed(
        d, 2, phases("testbed up: both VMs from the node image"), image=image, cpus=2
    ) as bed:
        phases.notes.append(
            f"accelerator {bed.accel} ({bed.accel_why}); boot {bed.timings['boot_s']} s"
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


BAKE_BLUEPRINT = {
    "name": "testbed",
    "purpose": "training",
    "owner": "testbed@localhost.localdomain",
    "description": "The testbed's cluster, for the node image the e2e bakes.",
    "target": {"type": "bare_metal", "ssh_user": "root", "private_cidr": lifecycle.PRIVATE_CIDR},
    "node_groups": [
        {
            "name": "vms",
            "hosts": [
                {"name": f"node{i}", "address": "127.0.0.1", "port": 2200 + i} for i in (1, 2)
            ],
        }
    ],
    "network": {"fabric": "ethernet", "interfaces": [lifecycle.PRIV_INTERFACE]},
    "storage": {"checkpoint": {"raid_level": 0, "mount": "/mnt/checkpoints"}},
    # The scenarios' cluster runs Slurm: the image holds its node packages (slurm_packages).
    "scheduler": SCHEDULER,
    "image": {"bake": True},
}


@pytest.fixture(scope="session", autouse=True)
def node_image(wheel_server, apt_server, tmp_path_factory, phases):
    """The node image, baked from the session's start in the background as a user bakes one
    for bare metal (`rackform image build`, rackform/testbed/builder.py): a VM of the base
    image, which holds none of the roles' packages, converges the baked roles (the driver's and
    DCGM's find no GPU and say so; NCCL's configuration and the fabric's packages; smoke_train's
    virtualenv with torch, from the wheel server), and its drive becomes the image. The suite's
    one converge from a bare image: every other scenario's VMs boot from it. Called, it gives
    the image's directory."""
    if wheel_server is None:
        yield lambda: pytest.fail(f"no torch {TORCH} CPU wheel on this machine for the bake")
        return
    tmp = tmp_path_factory.mktemp("node-image")
    bp = tmp / "testbed-bake.yaml"
    bp.write_text(yaml.safe_dump(BAKE_BLUEPRINT, sort_keys=False))
    out = cache_dir() / "node-image-e2e"
    log = cache_dir() / "node-image.log"
    wheels = bootstrap_wheelhouse()
    with ExitStack() as servers:
        ansible_port = servers.enter_context(_served(wheels))
        pip = [f"--pip-arg={a}" for a in ("--no-index", "--trusted-host=10.0.2.2",
               f"--find-links=http://10.0.2.2:{ansible_port}/")]  # fmt: skip
        start = time.monotonic()
        with log.open("w") as written:
            build = subprocess.Popen(
                [sys.executable, "-m", "rackform", "image", "build", bp, "--out", out,
                 "--format", "raw", "--apt-source", sources_line(apt_server).strip(), *pip,
                 # The builder runs Ansible's controller beside each task's module.
                 "--cpus", "2",
                 *smoke_vars(wheel_server)],
                stdout=written, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its VM's QEMU with it, if stopped early
            )  # fmt: skip

        def done() -> Path:
            rc = build.wait()
            assert rc == 0, f"the node image's bake failed:\n{log.read_text()[-4000:]}"
            if not phases.notes or "node image" not in phases.notes[0]:
                took = round(time.monotonic() - start)
                phases.notes.insert(0, f"node image: baked in the background ({took} s wall):")
                lines = log.read_text().splitlines()
                steps = [
                    x
                    for x in lines[:-6]
                    if re.fullmatch(r"image: .*: \d+ s|.* answers SSH after .*", x)
                ]
                phases.notes[1:1] = [f"  {line}" for line in steps + lines[-6:]]
            return out

        try:
            yield done
        finally:
            if build.poll() is None:
                os.killpg(build.pid, signal.SIGTERM)
                build.wait()


@contextmanager
def _served(directory: Path):
    handler = functools.partial(_QuietHandler, directory=str(directory))
    with http_server(handler) as port:
        yield port


@pytest.fixture(scope="session")
def wheel_server(torch_wheelhouse):
    """The torch wheelhouse served on 127.0.0.1 (None without one); the guests reach the host's
    loopback at 10.0.2.2 through QEMU's user network."""
    if torch_wheelhouse is None:
        yield None
        return
    with _served(torch_wheelhouse) as port:
        yield port


@pytest.fixture(scope="session")
def apt_server(phases):
    """The packages the roles install, served on 127.0.0.1 (the guests' 10.0.2.2): the node
    image's bake and the VMs take them from here only."""
    from rackform.testbed.apt import ensure_repo

    with phases("local package repository (cached after the first download)"):
        repo = ensure_repo(log=lambda line: None)
    with _served(repo) as port:
        yield port


@pytest.fixture(scope="session")
def apt_repo(testbed, apt_server):
    """The local package repository as the VMs' only apt source (the node image keeps its
    base's sources, and the roles not baked must bring what they need). The package lists go,
    and read as never updated: a source just changed is what apt must read before it installs.
    (Left there, they were too recent for the slurm role's cache_valid_time, and apt knew no
    munge.)"""
    line = sources_line(apt_server).strip()
    for node in ("node1", "node2"):
        sh(
            testbed,
            node,
            f"rm -f /etc/apt/sources.list.d/*; echo '{line}' > /etc/apt/sources.list;"
            " find /var/lib/apt/lists -maxdepth 1 -type f -delete;"
            " rm -f /var/lib/apt/periodic/update-success-stamp;"
            " touch -d @0 /var/lib/apt/lists",
        )
    return apt_server


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
