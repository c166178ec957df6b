"""The e2e's session fixtures: one testbed (two Debian VMs under QEMU), the wheel server and the
package repository, shared by every e2e file in the session, so that a later file runs on the
VMs an earlier one booted. No file relies on another having run first: each asks for the
fixtures it needs (they fill rackform's cache on first use: the testbed's image, the package
repository, the wheelhouses) and brings the VMs to the state it starts from, so the files pass
alone, on an empty cache, and in any order.
The shared helpers (`cli`, `sh`, `shown`, `blueprint`) are in tests/e2e/vms.py.

Converge once, reuse everywhere: `converged` runs the session's one converge of every role from
the bare image and freezes the VMs' drives right after it; each scenario that needs converged
VMs asks `converged.use(...)`, which restores that state (a boot, about a minute) unless the
VMs are untouched since, so no scenario starts from what another left behind.

And the phase timer: each phase's time is printed when the session's tests end and again in
pytest's closing summary, just above the short test summary, where the tail of a CI log shows
it."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from loopback import http_server
from vms import (
    DIRTY,
    SLURM_VARS,
    TORCH,
    blueprint,
    booted_testbed,
    cli,
    find_torch_wheel,
    node_state,
    sh,
    slowest_tasks,
    smoke_vars,
    start_imds,
)

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
def testbed(tmp_path_factory, phases):
    d = tmp_path_factory.mktemp("testbed")
    label = "testbed up: base image (cached after the first build) and 2 VMs booted"
    with booted_testbed(d, 2, phases(label)) as bed:
        phases.notes.append(
            f"accelerator {bed.accel} ({bed.accel_why}); image {bed.timings['image_s']} s,"
            f" boot {bed.timings['boot_s']} s"
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
    image holds none of them: the roles must bring what they need)."""
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
                f"rm -f /etc/apt/sources.list.d/*; echo '{line}' > /etc/apt/sources.list",
            )
        yield port


# The first converge's deadline: about 20 minutes on an idle 2-core machine under TCG (every role
# from a bare image on both VMs, torch and Slurm's packages included, and the smoke job), and
# up to twice that where other work shares the machine.
FIRST_CONVERGE_S = 3000


@dataclass
class Converged:
    """The session's one converge from the bare image: every role (Slurm, torch and the smoke
    job through Slurm included) on both VMs, which is the test of the roles; what was run just
    before it on the fresh VMs (check mode, safe mode); and the VMs' drives frozen right after it
    as the state `converged`, which every later scenario starts from (`use`)."""

    bed: lifecycle.Testbed
    blueprint: Path
    key: list  # --private-key/--known-hosts
    converge: list  # `rackform configure` arguments of the converge, without --env and roles
    reports: Path
    check: subprocess.CompletedProcess  # configure --check --diff on fresh node1
    unchanged: bool  # node1's state the same before and after it
    refused: subprocess.CompletedProcess  # safe mode on node2: a drive holding data
    kept: subprocess.CompletedProcess  # the data on that drive checked after the refusal
    first: subprocess.CompletedProcess  # the converge
    controller_tmp: Path  # TMPDIR of every run above
    clean: bool = True  # the VMs are as frozen, untouched since

    def use(self, phases: Phases, scenario: str) -> lifecycle.Testbed:
        """The VMs in the converged state for `scenario`: as they are if nothing touched them
        since the freeze, else restored (a boot). The scenario may then change them."""
        if not self.clean:
            with phases(f"{scenario}: restore the converged VMs (both boot)"):
                lifecycle.restore(self.bed, "converged")
        self.clean = False
        return self.bed


@pytest.fixture(scope="session")
def converged(testbed, apt_repo, wheel_server, phases, tmp_path_factory) -> Converged:
    bed = testbed
    if wheel_server is None:
        pytest.fail(
            f"no torch {TORCH} CPU wheel on this machine for smoke_train (looked in"
            " $PIP_FIND_LINKS, /opt/wheels, /opt/pypi*/files)"
        )
    tmp = tmp_path_factory.mktemp("converged")
    controller_tmp = tmp / "controller-tmp"
    controller_tmp.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(controller_tmp))
        return _converge(bed, wheel_server, phases, tmp, controller_tmp)


def _converge(bed, wheel_server, phases, tmp: Path, controller_tmp: Path) -> Converged:
    bp = blueprint(bed, tmp)
    key = ["--private-key", bed.key, "--known-hosts", bed.known_hosts]
    reports = tmp / "reports"
    converge = [bp, *key, "--report-dir", reports, *SLURM_VARS, *smoke_vars(wheel_server)]
    start_imds(bed)

    # On the fresh VMs, one run each at once (each VM has one emulated CPU): check mode on node1
    # (every role but slurm, whose check mode on a host without its packages proves nothing),
    # and safe mode on node2, whose drive holds a filesystem with data.
    sh(bed, "node2", f"mkfs.ext4 -q -L keepme {DIRTY} && mkdir -p /mnt/keep && mount {DIRTY}"
       " /mnt/keep && head -c 4M /dev/urandom > /mnt/keep/data && sha256sum /mnt/keep/data"
       " > /root/keep.sum && umount /mnt/keep")  # fmt: skip
    before = node_state(bed, "node1")
    roles = [x for r in ("nvidia_driver", "nccl_rdma", "nvme_raid", "dcgm", "smoke_train")
             for x in ("--role", r)]  # fmt: skip
    with phases("at once: configure --check --diff on fresh node1; safe mode on node2 (nvme_raid"
                " refuses a drive with a filesystem)"):  # fmt: skip
        with ThreadPoolExecutor(max_workers=2) as pool:
            check = pool.submit(
                cli, "configure", *converge, *roles, "--check", "--diff", "--limit", "node1"
            )
            safe = pool.submit(
                cli, "configure", bp, *key, "--limit", "node2", "--role", "nvme_raid"
            )
        check, refused = check.result(), safe.result()
    unchanged = node_state(bed, "node1") == before
    kept = bed.ssh("node2").run(
        f"mount -o ro {DIRTY} /mnt/keep && sha256sum -c /root/keep.sum; umount /mnt/keep",
        check=False,
    )

    # Every role, allowing the wipe (environment `wipe`).
    events = tmp / "first-converge-events"
    with phases("configure (first converge): every role, torch, Slurm, the smoke job through it"):
        try:
            first = cli("configure", *converge, "--env", "wipe", "--artifacts", events,
                        timeout=FIRST_CONVERGE_S)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            tail = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            pytest.fail(
                f"the first converge ran past {exc.timeout:.0f} s; where it was:\n{tail[-6000:]}"
            )
    phases.notes.append("the first converge's slowest tasks (wall, both VMs at once):")
    phases.notes += [f"  {line}" for line in slowest_tasks(events)]
    # The freeze is a power cycle after a sync, like the reboot a converged node sees: the array
    # must come back from fstab, as /dev/md/checkpoints even where /etc/hostname names the host
    # otherwise than the kernel does (node1's, in the frozen state: the testbed's kernel takes
    # its host name from its command line).
    if first.returncode == 0:
        sh(bed, "node1", "echo renamed-node1 > /etc/hostname")
        with phases("freeze the converged VMs (a power cycle after sync; both boot)"):
            lifecycle.freeze(bed, "converged")
    return Converged(
        bed, bp, key, converge, reports, check, unchanged, refused, kept, first, controller_tmp
    )
