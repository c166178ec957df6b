"""A real Slurm cluster on this machine for the scheduler tests: Debian's slurmctld and two
slurmd (Debian builds Slurm with multiple-slurmd, so two nodes share 127.0.0.1 on their own
ports), in the foreground as the current user, from a generated slurm.conf in a temp dir:
auth/none (no munge daemon), proctrack/linuxproc (no cgroup), task/none, the job records in
`jobcomp/filetxt`, every port a free loopback port, a requeued job eligible again after 6 s
(Slurm holds it for the credential lifetime plus one, `cred_expire`, 120 s by default), MessageTimeout 4 s (a client gives up on a
stopped slurmctld after about 3 s rather than Slurm's default 9). Each node has two GPUs as GRES: Slurm
insists on a device file for a GPU and these are plain files (slurmd logs that they are not
character devices and counts them all the same), so jobs can ask for `--gres=gpu:N`. What this
Slurm cannot show: `gres/gpu` in a job record's TRES, which Slurm tracks only with slurmdbd
(`AccountingStorageTRES=gres/gpu` without it stops slurmctld: "slurmdbd is required").

The clients (squeue, sinfo, scontrol, sbatch) find the cluster by $SLURM_CONF: `env` holds it.
Started once per test session (`cluster()`), stopped at its end: every job cancelled first, then
the daemons, then whatever is left of their sessions (a job's slurmstepd outlives its slurmd).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import fake_ssh
import pytest
from loopback import free_port

from rackform.scheduler.remote import Local

NODES = ("slurm-a-0", "slurm-a-1")
GPUS_PER_NODE = 2
PARTITIONS = ("batch-gpu", "scav-low")  # hyphens, as the blueprint schema allows
TOOLS = ("slurmctld", "slurmd", "squeue", "sinfo", "scontrol", "sbatch", "scancel")


def _conf(
    root: Path,
    ctld_port: int,
    node_ports: list[int],
    extra: str = "",
    names: tuple[str, ...] = NODES,
    gpus: int = GPUS_PER_NODE,
) -> str:
    user = getpass.getuser()
    nodes = "\n".join(
        f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname=localhost Port={p} CPUs=2 "
        f"RealMemory=500 Gres=gpu:h100_sxm:{gpus} State=UNKNOWN"
        for n, p in zip(names, node_ports, strict=True)
    )
    every = ",".join(names)
    return f"""ClusterName=rackform-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/none
CredType=cred/none
SlurmUser={user}
SlurmdUser={user}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
GresTypes=gpu
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.log
ReturnToService=2
MinJobAge=2
MessageTimeout=4
AuthInfo=cred_expire=5
MpiDefault=none
{nodes}
PartitionName={PARTITIONS[0]} Nodes={every} Default=YES MaxTime=INFINITE State=UP
PartitionName={PARTITIONS[1]} Nodes={every} Default=NO MaxTime=INFINITE State=UP
{extra}"""


@dataclass
class LocalSlurm:
    root: Path
    env: dict[str, str]
    jobcomp: Path
    nodes: tuple[str, ...] = NODES
    # What each command runs inside: () runs this machine's Slurm; tests/slurm_block_local.py
    # gives the argv that runs it in Debian 13's root instead.
    wrap: tuple[str, ...] = ()
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    started_s: float = 0.0  # how long the cluster took to answer with every node idle

    @property
    def user(self) -> str:
        return getpass.getuser()

    @property
    def runner(self) -> Local:
        return Local(self.env)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = (*self.wrap, *argv)
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=60)
        if check and done.returncode:
            shown = " ".join(argv[len(self.wrap) :])
            raise AssertionError(f"{shown}: {done.stderr.strip() or done.stdout}")
        return done

    def sbatch(self, *args: str) -> str:
        """Submit a job whose working directory (and so its slurm-<id>.out) is this Slurm's
        own, never the directory the tests run in."""
        chdir = f"--chdir={self.root / 'log'}"
        return self.run("sbatch", "--parsable", chdir, *args).stdout.strip().split(";")[0]

    def state(self, job: str) -> str:
        return self.run(
            "squeue", "--noheader", "--states=all", "-j", job, "-o", "%T"
        ).stdout.strip()

    def wait(self, what, timeout: float = 30, every: float = 0.2):
        end = time.monotonic() + timeout
        while True:
            got = what()
            if got or time.monotonic() > end:
                return got
            time.sleep(every)

    def wait_state(self, job: str, state: str, timeout: float = 30) -> None:
        if not self.wait(lambda: self.state(job) == state, timeout):
            raise AssertionError(f"job {job} is {self.state(job)!r}, not {state} ({self.log()})")

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "--noheader", "--Node", "--format=%N|%T", check=False).stdout
        return dict(line.split("|", 1) for line in out.split() if "|" in line)

    def clean(self) -> None:
        """No job, every node back in service: each test starts from here."""
        self.run("scancel", f"--user={getpass.getuser()}", check=False)
        busy = lambda: self.run("squeue", "--noheader", check=False).stdout.strip()  # noqa: E731
        if not self.wait(lambda: not busy(), 30):
            raise AssertionError(f"jobs left after scancel: {busy()}")
        every = ",".join(self.nodes)
        self.run("scontrol", "update", f"nodename={every}", "state=resume", check=False)
        if not self.wait(lambda: set(self.node_states().values()) == {"idle"}, 30):
            raise AssertionError(f"nodes not idle: {self.node_states()} ({self.log()})")

    def log(self) -> str:
        path = self.root / "log" / "slurmctld.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "slurmctld.log: " + " / ".join(lines[-5:])

    def _start(self, name: str, argv: list[str]) -> None:
        out = (self.root / "log" / f"{name}.out").open("a")
        self.procs[name] = subprocess.Popen(
            [*self.wrap, *argv],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_controller(self, clear: bool) -> None:
        self._start("slurmctld", ["slurmctld", "-D", "-i", *(["-c"] if clear else [])])
        up = lambda: self.run("sinfo", "--noheader", check=False).returncode == 0  # noqa: E731
        if not self.wait(up, 30):
            raise AssertionError(f"slurmctld does not answer ({self.log()})")

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    @contextmanager
    def controller_down(self) -> Iterator[None]:
        """slurmctld stopped for the block, then started again on its saved state."""
        self.stop("slurmctld")
        try:
            yield
        finally:
            self.start_controller(clear=False)
            self.wait(lambda: set(self.node_states().values()) <= {"idle", "allocated", "mixed"})

    def shutdown(self) -> None:
        sessions = {p.pid for p in self.procs.values()}
        try:
            self.run("scancel", f"--user={getpass.getuser()}", check=False)
            self.wait(lambda: not self.run("squeue", "-h", check=False).stdout.strip(), 15)
        finally:
            left = _members(sessions)
            for name in [n for n in self.procs if n != "slurmctld"] + ["slurmctld"]:
                self.stop(name)
            for pid in left - sessions:  # a job's slurmstepd, started in a daemon's session
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _members(sessions: set[int]) -> set[int]:
    """Every process whose session is one of `sessions` (our daemons' own, from setsid)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) in sessions:  # after the name: state, ppid, pgrp, session
            out.add(int(stat.parent.name))
    return out


def start(
    root: Path,
    extra_conf: str = "",
    before: Callable[[LocalSlurm], None] | None = None,
    nodes: tuple[str, ...] = NODES,
    gpus: int = GPUS_PER_NODE,
    wrap: tuple[str, ...] = (),
) -> LocalSlurm:
    """This Slurm, up with every node idle. `extra_conf`: lines added to slurm.conf; `before`:
    run once the files are written, before slurmctld starts (tests/slurm_accounting_local.py
    starts slurmdbd there); `nodes`, each with `gpus` GPUs; `wrap`: the argv every daemon and
    command runs inside (LocalSlurm.wrap)."""
    t0 = time.monotonic()
    for d in ("state", "log", "dev", *(f"spool/{n}" for n in nodes)):
        (root / d).mkdir(parents=True, exist_ok=True)
    gres = []
    for n in nodes:
        for i in range(gpus):
            (root / "dev" / f"{n}-nvidia{i}").touch()
        gres.append(f"NodeName={n} Name=gpu Type=h100_sxm File={root}/dev/{n}-nvidia[0-{gpus - 1}]")
    (root / "gres.conf").write_text("\n".join(gres) + "\n")
    conf = root / "slurm.conf"
    ports = [free_port() for _ in nodes]
    conf.write_text(_conf(root, free_port(), ports, extra_conf, nodes, gpus))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    slurm = LocalSlurm(root, env, root / "jobcomp.log", nodes, wrap)
    try:
        if before is not None:
            before(slurm)
        slurm.start_controller(clear=True)
        for n in nodes:
            slurm._start(f"slurmd-{n}", ["slurmd", "-D", "-N", n])
        if not slurm.wait(lambda: set(slurm.node_states().values()) == {"idle"}, 30):
            raise AssertionError(f"nodes not idle: {slurm.node_states()} ({slurm.log()})")
    except BaseException:
        slurm.shutdown()
        raise
    slurm.started_s = time.monotonic() - t0
    return slurm


def blueprint(action: str = "drain", grace: int = 0, protect: bool = False) -> str:
    """A bare-metal blueprint whose hosts are this Slurm's nodes (`slurm-a-0` its controller),
    with the partitions slurm.conf has; reached over SSH on addresses nothing answers on, so
    only fake_ssh (`ssh_env`) reaches them, by running the command here."""
    hosts = "\n".join(
        f"      - {{name: {n}, address: 10.77.7.{i + 1}}}" for i, n in enumerate(NODES)
    )
    return f"""name: slurm-a
purpose: training
owner: ops@example.com
target: {{type: bare_metal, ssh_port: 2222, capex_usd_per_gpu: 30000, amortize_months: 36}}
node_groups:
  - name: gpu
    gpu: H100-SXM
    gpus_per_node: {GPUS_PER_NODE}
    hosts:
{hosts}
network: {{fabric: ethernet}}
scheduler:
  type: slurm
  controller: {NODES[0]}
  partitions:
    - {{name: {PARTITIONS[0]}, node_groups: [gpu], default: true, priority_tier: 10}}
    - {{name: {PARTITIONS[1]}, node_groups: [gpu], priority_tier: 1, preemptible: true}}
lifecycle:
  protect: {str(protect).lower()}
  idle: {{gpu_util_below_pct: 10, for_minutes: 60, action: {action}, grace_minutes: {grace}}}
"""


def ssh_env(slurm: LocalSlurm, tmp: Path, fail: bool = False) -> dict[str, str]:
    """The environment for a `rackform` subprocess whose ssh (tests/fake_ssh.py, first on PATH)
    runs the controller's commands on this machine, against this Slurm; each ssh argv is
    logged to tmp/ssh.log. `fail`: every host unreachable."""
    return fake_ssh.environ(tmp, slurm.env, fail)


_SHARED: list[LocalSlurm] = []


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory, request) -> LocalSlurm:
    """The session's one local Slurm, shared by every module that imports these fixtures."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:  # as the other real servers of the suite: a missing tool fails, never skips
        pytest.fail(f"{', '.join(missing)} not installed: run scripts/setup.sh --test")
    if not _SHARED:
        _SHARED.append(start(tmp_path_factory.mktemp("slurm")))
        request.config.add_cleanup(_SHARED[0].shutdown)
    return _SHARED[0]


@pytest.fixture
def slurm(slurm_cluster: LocalSlurm) -> LocalSlurm:
    """The local Slurm, clean: no job, every node in service."""
    slurm_cluster.clean()
    return slurm_cluster
