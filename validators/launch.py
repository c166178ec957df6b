"""Run the host checks and the smoke job on this node and merge them into one report:

    python -m validators.launch --nproc 8 --json report.json [--torchrun "..."] -- JOB ARGS

The job runs under torchrun (`python -m torch.distributed.run`, no restarts), its output
streamed through. Or, with `--node-rank/--nnodes/--master` (where a scheduler has already
started every node's part at once: one Slurm task per node), this launcher starts the node's
workers itself, as srun starts a job's tasks, with the ranks and the rendezvous address in their
environment (torch.distributed's env://): no torchrun agent, whose own `import torch` takes a
minute on a slow host before the workers even start. However the job ends, the report says what
happened: `job_completed` passes only on evidence that every rank reached the end (the job's end
marker, written after all ranks came through the last phase, and every worker's exit 0: every
rank left cleanly); a rank that died or stalled fails it, naming the rank and the cause (from
torchrun's own summary, or from the worker this launcher saw fail), and every check the job
never reached becomes not-run. A whole-run deadline backs up the job's own timeouts. Standard
library only (torch is imported by the job, not here).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from validators import report, slurm_env
from validators.deps import numpy_missing
from validators.report import Check, failed, not_run

ROOT = str(Path(__file__).resolve().parent.parent)  # the directory holding `validators/`


@dataclass
class Proc:
    rc: int | None
    lines: list[str]
    timed_out: bool
    # What started the workers ("torchrun", or "the workers" where this launcher did), and the
    # first worker it saw fail, in one line (None where torchrun's summary says it).
    launcher: str = "torchrun"
    cause: str | None = None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [env.get("PYTHONPATH")])])
    # torchrun sets OMP_NUM_THREADS=1 for each worker when it is unset, announcing it in a
    # banner on stderr in the middle of the run's output; the same value, set here, silences
    # it. A value of the user's own is kept.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _spawn(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`cmd` in a process group of its own (stopped whole at a deadline), its output and
    errors on one text pipe."""
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,
    )


def stream(
    cmd: list[str], timeout_s: float, out=None, keep: int = 400, grace_s: float = 10.0
) -> Proc:
    """Run `cmd` in its own process group, copying its output to `out` as it comes and
    keeping the last `keep` lines; past the deadline the whole group gets SIGTERM, then
    SIGKILL after `grace_s`."""
    out = out or sys.stderr
    tail: collections.deque[str] = collections.deque(maxlen=keep)
    p = _spawn(cmd, _env())

    def pump() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            tail.append(line.rstrip("\n"))
            out.write(line)
            out.flush()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    timed_out = False
    try:
        p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(p, grace_s)
    t.join(timeout=5)
    return Proc(p.returncode, list(tail), timed_out)


def _kill_group(p: subprocess.Popen, grace_s: float) -> None:
    for sig, grace in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass(frozen=True)
class Layout:
    """Where this node's workers sit in the job: its rank among `nnodes` nodes, and the
    rendezvous address, on the node of rank 0 (global rank 0 hosts torch's TCP store there)."""

    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int

    @classmethod
    def parse(cls, node_rank: int, nnodes: int, master: str) -> Layout:
        addr, sep, port = master.rpartition(":")
        if not sep or not addr or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--master {master!r}: give HOST:PORT")
        if nnodes < 1:
            raise ValueError(f"--nnodes {nnodes} must be at least 1")
        if not 0 <= node_rank < nnodes:
            raise ValueError(f"--node-rank {node_rank} must be in 0..{nnodes - 1} (--nnodes)")
        return cls(node_rank, nnodes, addr.strip("[]"), int(port))

    def worker_env(self, nproc: int, local_rank: int) -> dict[str, str]:
        """What torchrun would give the worker (the variables env:// and the job read)."""
        return {
            "RANK": str(self.node_rank * nproc + local_rank),
            "WORLD_SIZE": str(self.nnodes * nproc),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(nproc),
            "GROUP_RANK": str(self.node_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def _signal_name(rc: int) -> str:
    try:
        return f" ({signal.Signals(-rc).name})" if rc < 0 else ""
    except ValueError:
        return ""


_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")


def _last_error(lines: list[str]) -> str:
    """A worker's error in one line: the last line of its traceback, else its last line."""
    # torch prefixes an uncaught error's lines with the rank ("[rank0]: Traceback ...").
    text = [_RANK_PREFIX.sub("", line).strip() for line in lines if line.strip()]
    tb = [i for i, line in enumerate(text) if line.startswith("Traceback (most recent call last)")]
    if tb:
        body = [line for line in text[tb[-1] + 1 :] if not line.startswith(("File ", "^", "~"))]
        return body[-1] if body else ""
    return text[-1] if text else ""


def _pump(p: subprocess.Popen, tails: tuple, lock: threading.Lock, out) -> None:
    """Copy a worker's output to `out` as it comes, a line at a time (never two workers'
    halves in one line), keeping it in each of `tails`."""
    assert p.stdout is not None
    for line in p.stdout:
        with lock:
            for kept in tails:
                kept.append(line.rstrip("\n"))
            out.write(line)
            out.flush()


def run_workers(
    cmd: list[str],
    envs: list[dict[str, str]],
    timeout_s: float,
    out=None,
    keep: int = 400,
    grace_s: float = 10.0,
    poll_s: float = 0.2,
) -> Proc:
    """Start one worker per entry of `envs` (each `cmd` with those variables added), each in a
    process group of its own, copying their output to `out` as it comes. As torchrun does with
    no restarts: the first worker to exit non-zero ends the job (the others get SIGTERM, then
    SIGKILL after `grace_s`) and is named in `cause`; past the deadline every worker is
    stopped. `rc` is 0 when every worker exited 0, else the first failure's exit status."""
    out = out or sys.stderr
    tail: collections.deque[str] = collections.deque(maxlen=keep)
    lock = threading.Lock()
    base = _env()
    procs, tails, pumps = [], [], []
    for env in envs:
        p = _spawn(cmd, {**base, **env})
        own: collections.deque[str] = collections.deque(maxlen=60)
        procs.append(p)
        tails.append(own)
        t = threading.Thread(target=_pump, args=(p, (tail, own), lock, out), daemon=True)
        t.start()
        pumps.append(t)
    deadline = time.monotonic() + timeout_s
    failed_at: int | None = None
    timed_out = False
    while True:
        codes = [p.poll() for p in procs]
        failed_at = next((i for i, rc in enumerate(codes) if rc not in (None, 0)), None)
        if failed_at is not None or all(rc == 0 for rc in codes):
            break
        if time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(poll_s)
    for p in procs:
        if p.poll() is None:
            _kill_group(p, grace_s)
    for t in pumps:
        t.join(timeout=5)
    cause = None
    rc: int | None = 0
    if failed_at is not None:
        rc = procs[failed_at].returncode
        rank = envs[failed_at].get("RANK", str(failed_at))
        err = _last_error(list(tails[failed_at]))
        cause = f"rank {rank} on {socket.gethostname()} failed: exit code {rc}{_signal_name(rc)}"
        cause = f"{cause}; {err}" if err else cause
    elif timed_out:
        rc = None
    return Proc(rc, list(tail), timed_out, launcher="the workers", cause=cause)


_FIELD = re.compile(r"^\s*(rank|exitcode|host|traceback)\s*:\s*(.*)$")


def root_cause(lines: list[str]) -> str | None:
    """torchrun's "Root Cause (first observed failure)" block, in one line: which rank, how
    it ended, and the last line of its error. torchrun orders failures by when it saw them, so a
    rank it stopped with SIGTERM after another died (its error, a lost peer, logged first) can
    come out as the root cause; a failure torchrun did not cause itself is named instead."""
    try:
        start = max(
            i for i, line in enumerate(lines) if "Root Cause (first observed failure)" in line
        )
    except ValueError:
        return None
    blocks = _failure_blocks(lines[start + 1 :])
    others = _failure_blocks(_failures_section(lines[:start]))
    root = blocks[0] if blocks else ({}, [])
    if _code(root[0]) == "-15":
        root = next((b for b in others if _code(b[0]) not in ("-15", "?")), root)
    fields, trace = root
    err = trace[-1] if trace else fields.get("traceback", "")
    if err.startswith("To enable traceback"):  # torchrun's note when a rank simply exited
        err = ""
    rank = fields.get("rank", "?").split(" ")[0]
    text = f"rank {rank} on {fields.get('host', '?')} failed: exit code {_code(fields, full=True)}"
    return f"{text}; {err}" if err else text


def _code(fields: dict[str, str], full: bool = False) -> str:
    code = re.sub(r"\(pid: \d+\)\s*", "", fields.get("exitcode", "?")).strip()
    return code if full else code.split(" ")[0]


def _failures_section(lines: list[str]) -> list[str]:
    """The lines of torchrun's "Failures:" section before the root cause (empty if none)."""
    starts = [i for i, line in enumerate(lines) if line.strip() == "Failures:"]
    return lines[starts[-1] + 1 :] if starts else []


def _failure_blocks(lines: list[str]) -> list[tuple[dict[str, str], list[str]]]:
    """Each `[n]:` block of a torchrun failure section: its fields and traceback lines."""
    blocks: list[tuple[dict[str, str], list[str]]] = []
    for line in lines:
        if line.startswith("====="):
            break
        if re.match(r"^\s*\[\d+\]:\s*$", line):
            blocks.append(({}, []))
            continue
        if not blocks or line.startswith("-----"):
            continue
        fields, trace = blocks[-1]
        m = _FIELD.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2).strip()
        elif "traceback" in fields and line.strip():
            trace.append(line.strip())
    return blocks


def _watchdog_lines(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if "no progress for" in line and "smoke: rank" in line]


def _setup_lines(lines: list[str]) -> list[str]:
    """The job's one-line refusals to start (a missing package), e.g. `smoke: numpy is ...`."""
    return [line.strip() for line in lines if line.startswith("smoke: ") and "pip install" in line]


def compose(
    host: dict | None,
    job: dict | None,
    proc: Proc | None,
    timeout_s: float,
    launch_s: dict[str, float] | None = None,
    not_started: str | None = None,
    slurm: dict | None = None,
) -> dict:
    """One report from the host checks, the job's (possibly partial) report, how the
    torchrun process ended (or `not_started`: why it never ran), in `launch_s` where this
    node's time went, and in `slurm` the Slurm job it ran in, with what Slurm allocated."""
    checks: list[Check] = []
    if host is not None:
        checks += report.checks_of(host)
    checks += report.checks_of(job) if job is not None else []
    checks = _against_ceiling(checks)
    complete = bool(job and job.get("complete") and _ended(job)[0])
    if not_started is not None:
        checks.append(
            failed(
                "job_completed",
                f"not started: {not_started}",
                measured="not started",
                expected="completed",
                op="==",
            )
        )
        complete = False
    elif proc is not None:
        done = _job_check(proc, job, timeout_s)
        checks.append(done)
        complete = done.status == report.PASS
    if job is None:
        why = f"not started: {not_started}" if not_started else "the job wrote no report"
        checks.append(not_run("smoke_job_checks", why))
    else:
        for name in job.get("pending", []):
            checks.append(not_run(name, "the job ended before this check ran"))
    extra = {k: job[k] for k in ("job", "metrics") if job and k in job}
    if host is not None and "host" in host:
        extra["host"] = host["host"]
    if launch_s:
        extra["launch_s"] = launch_s
    if slurm:
        extra["slurm"] = slurm
    return report.make(checks, complete=complete, **extra)


def _against_ceiling(checks: list[Check]) -> list[Check]:
    """Show the checkpoint's write speed as a share of what the disk took in the direct-IO
    probe: a low share points at the writer (threads, page cache), not the array."""
    by = {c.name: c for c in checks}
    ceil, ck = by.get("storage_write_ceiling"), by.get("checkpoint_write")
    if not (ceil and ck) or not all(isinstance(c.measured, int | float) for c in (ceil, ck)):
        return checks
    if ceil.measured <= 0:
        return checks
    note = f"{100 * ck.measured / ceil.measured:.0f}% of the storage ceiling"
    detail = f"{ck.detail}; {note}" if ck.detail else note
    return [dataclasses.replace(c, detail=detail) if c is ck else c for c in checks]


def _ended(job: dict | None) -> tuple[bool, str]:
    """Whether the job's report proves that every rank reached the end of the job, and what
    it shows either way. The proof is the end marker: the job writes it only after a
    collective that every rank joins once it is through the last phase."""
    if job is None:
        return False, "the job wrote no report"
    world = (job.get("job") or {}).get("world_size")
    end = job.get("ended")
    if not isinstance(end, dict):
        phases = list((job.get("metrics") or {}).get("phases_s") or {})
        where = f"during or after its '{phases[-1]}' phase" if phases else "before its first phase"
        return False, f"the report has no end marker: the job stopped {where}"
    ranks = end.get("ranks")
    if not isinstance(world, int) or not isinstance(ranks, int) or ranks != world:
        return False, f"{ranks} of {world} ranks reached the end of the job"
    return True, f"all {world} ranks reached the end of the job"


def _job_check(proc: Proc, job: dict | None, timeout_s: float) -> Check:
    """Passes only when the report carries the end marker for every rank and torchrun exited
    0 (every rank exited 0: the job runs with --verdict-in-report, so a failed check is in
    the report, never in an exit status). Anything else fails, naming the cause."""
    name = "job_completed"
    ended, seen = _ended(job)
    if proc.timed_out:
        return failed(
            name,
            f"the whole run passed its {timeout_s:g} s deadline and was stopped",
            measured="timed out",
            expected="completed",
            op="==",
        )
    if proc.rc == 0 and ended:
        return Check(
            name, report.PASS, "completed", "completed", "", "==", f"{seen}; {proc.launcher} exit 0"
        )
    if proc.rc == 0:
        why = f"{proc.launcher} exited 0 but {seen}"
    else:
        why = proc.cause or root_cause(proc.lines) or f"{proc.launcher} exited {proc.rc}"
        for extra in (*_watchdog_lines(proc.lines)[:1], *_setup_lines(proc.lines)[:1]):
            why = f"{why}; {extra}"
        if ended:  # through the last phase, then a rank failed on its way out
            why = f"{why} ({seen}, then a rank did not exit cleanly)"
    return failed(name, why, measured="failed", expected="completed", op="==")


def host_missing(hproc: Proc) -> dict:
    """The host checks' report when they wrote none: one failed check saying why."""
    why = root_cause(hproc.lines) or (hproc.lines[-1] if hproc.lines else "no output")
    if hproc.timed_out:
        why = f"stopped at the run's deadline; {why}"
    return report.make([failed("host_checks", f"host checks wrote no report: {why}")])


def _read(path: str) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def job_cmd(job_args: list[str], report_path: str) -> list[str]:
    """A worker's command line: the job, its verdict in its report."""
    return [
        sys.executable,
        "-m",
        "validators.smoke",
        "--report",
        report_path,
        "--no-table",
        "--verdict-in-report",
        *job_args,
    ]


def torchrun_cmd(
    nproc: int, torchrun_args: list[str], job_args: list[str], report_path: str
) -> list[str]:
    rdzv = torchrun_args or ["--standalone"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--max-restarts=0",
        *rdzv,
        *job_cmd(job_args, report_path)[1:],  # `-m validators.smoke ...`
    ]


def run(
    nproc: int,
    job_args: list[str],
    host_args: list[str] | None,
    timeout_s: float = 900.0,
    torchrun_args: list[str] | None = None,
    out=None,
    layout: Layout | None = None,
    host_gate: bool = False,
) -> dict:
    """Host checks (unless host_args is None), then the job (under torchrun, or its workers
    started here where `layout` places the node); the merged report. `host_gate`: a host
    check that fails ends the run there, the job not started (a one-node run only: see
    `one_node`)."""
    launch_s: dict[str, float] = {}
    slurm = slurm_env.facts()  # under sbatch/srun: the job and what Slurm allocated it
    with tempfile.TemporaryDirectory(prefix="rackform-smoke-") as tmp:
        host = None
        start = time.time()
        if host_args is not None:
            hp = os.path.join(tmp, "host.json")
            cmd = [
                sys.executable,
                "-m",
                "validators.hostcheck",
                "--json",
                hp,
                "--no-table",
                *host_args,
            ]
            hproc = stream(cmd, timeout_s, out)
            host = _read(hp)
            if host is None:
                host = host_missing(hproc)
            launch_s["host_checks"] = round(time.time() - start, 3)
            if host_gate and (bad := host_failures(host)):
                why = f"the host checks failed ({', '.join(bad)})"
                print(f"smoke: {why}: the job is not started", file=out or sys.stderr, flush=True)
                return compose(host, None, None, timeout_s, launch_s, why, slurm)
        missing = numpy_missing()
        if missing:  # the job would die in its first collective; say why instead
            print(f"smoke: {missing}", file=out or sys.stderr, flush=True)
            return compose(host, None, None, timeout_s, launch_s, missing, slurm)
        jp = os.path.join(tmp, "job.json")
        start = time.time()
        if layout is None:
            proc = stream(torchrun_cmd(nproc, torchrun_args or [], job_args, jp), timeout_s, out)
            launch_s["torchrun"] = round(time.time() - start, 3)
        else:
            envs = [layout.worker_env(nproc, i) for i in range(nproc)]
            proc = run_workers(job_cmd(job_args, jp), envs, timeout_s, out)
            launch_s["workers"] = round(time.time() - start, 3)
        job = _read(jp)
        began = ((job or {}).get("job") or {}).get("started")
        if isinstance(began, int | float):
            # (torchrun and) the workers importing torch, the rendezvous and the process group
            launch_s["until_job_started"] = round(began - start, 3)
        return compose(host, job, proc, timeout_s, launch_s, slurm=slurm)


def host_failures(host: dict) -> list[str]:
    """The names of the host checks that failed (a report that cannot be read: one entry)."""
    try:
        return [c.name for c in report.checks_of(host) if c.status == report.FAIL]
    except report.ReportError as exc:
        return [f"unreadable host report: {exc}"]


def one_node(layout: Layout | None, torchrun_args: list[str]) -> bool:
    """Whether the job runs on this node alone. Only such a run may skip its job when the
    host checks fail: in a job over several nodes the others would wait for this one at the
    rendezvous until their timeout."""
    if layout is not None:
        return layout.nnodes == 1
    nnodes = None
    for i, arg in enumerate(torchrun_args):
        if arg.startswith("--nnodes="):
            nnodes = arg.split("=", 1)[1]
        elif arg == "--nnodes" and i + 1 < len(torchrun_args):
            nnodes = torchrun_args[i + 1]
    return nnodes is None or nnodes in ("1", "1:1")


def parser() -> argparse.ArgumentParser:
    """The launcher's command line. Values that are themselves command lines (--torchrun,
    --host-args) are passed as `--torchrun=VALUE` by the smoke_train role: a separate value that
    starts with an option of this parser (`--nnodes=4 ...`) would be read as that option.
    No abbreviations: a value's first word must never match an option by its prefix."""
    p = argparse.ArgumentParser(
        prog="validators.launch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--nproc", type=int, required=True, help="Processes (GPUs) on this node.")
    p.add_argument("--json", help="Write the merged report here.")
    p.add_argument(
        "--torchrun", default="", help="Rendezvous arguments for torchrun (default --standalone)."
    )
    p.add_argument(
        "--node-rank",
        type=int,
        help="Start the workers here rather than under torchrun: this node's rank (0: the node"
        " at --master), with --nnodes and --master.",
    )
    p.add_argument("--nnodes", type=int, help="Nodes in the job (with --node-rank).")
    p.add_argument("--master", help="HOST:PORT of the node of rank 0 (with --node-rank).")
    p.add_argument("--host-args", default="", help="Arguments for validators.hostcheck.")
    p.add_argument("--no-host-checks", action="store_true")
    p.add_argument(
        "--skip-job-on-host-failure",
        action="store_true",
        help="When a host check fails, end there: the job is not started and the report says"
        " so (its verdict fails either way). A run on one node only: a node of a larger job"
        " would leave the others waiting at the rendezvous.",
    )
    p.add_argument("--timeout-s", type=float, default=900.0)
    p.add_argument(
        "job_args", nargs=argparse.REMAINDER, help="-- then arguments for validators.smoke"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    job_args = a.job_args[1:] if a.job_args[:1] == ["--"] else a.job_args
    host_args = None if a.no_host_checks else shlex.split(a.host_args)
    layout = None
    given = [a.node_rank is not None, a.nnodes is not None, a.master is not None]
    if any(given):
        if not all(given) or a.torchrun:
            p.error("--node-rank, --nnodes and --master go together, and without --torchrun")
        try:
            layout = Layout.parse(a.node_rank, a.nnodes, a.master)
        except ValueError as e:
            p.error(str(e))
    torchrun_args = shlex.split(a.torchrun)
    if a.skip_job_on_host_failure and not one_node(layout, torchrun_args):
        p.error("--skip-job-on-host-failure is for a job on one node only")
    doc = run(
        a.nproc,
        job_args,
        host_args,
        a.timeout_s,
        torchrun_args,
        layout=layout,
        host_gate=a.skip_job_on_host_failure,
    )
    if a.json:
        Path(a.json).write_text(report.dumps(doc))
    print(report.table(doc), flush=True)
    return report.exit_code(doc)


if __name__ == "__main__":
    sys.exit(main())
