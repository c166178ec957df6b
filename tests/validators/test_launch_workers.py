"""validators.launch starting a node's workers itself (`--node-rank/--nnodes/--master`), as a
Slurm task per node does instead of torchrun: the ranks each worker gets, the first failure
ending the node's job and named in its report, the deadline, and a real two-node job on
loopback (two launchers, one gloo worker each, the smoke job from the collection's validators).
Bad arguments are refused by the launcher's own parser, with the flag named."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import pytest
from loopback import free_port
from smoke_helpers import MOUNTS, ROOT, env

from validators import launch
from validators.report import FAIL, PASS


def test_each_worker_gets_its_ranks_and_the_rendezvous():
    layout = launch.Layout.parse(1, 3, "10.0.0.5:29400")
    envs = [layout.worker_env(4, i) for i in range(4)]
    assert [e["RANK"] for e in envs] == ["4", "5", "6", "7"]
    assert {e["WORLD_SIZE"] for e in envs} == {"12"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {(e["LOCAL_WORLD_SIZE"], e["GROUP_RANK"]) for e in envs} == {("4", "1")}
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("10.0.0.5", "29400")}
    assert launch.Layout.parse(0, 1, "[fd00::1]:29400").master_addr == "fd00::1"


@pytest.mark.parametrize(
    ("rank", "nnodes", "master", "said"),
    [
        (2, 2, "h:1", "--node-rank 2 must be in 0..1"),
        (-1, 2, "h:1", "--node-rank -1 must be in 0..1"),
        (0, 0, "h:1", "--nnodes 0 must be at least 1"),
        (0, 2, "h", "--master 'h': give HOST:PORT"),
        (0, 2, "h:port", "--master 'h:port': give HOST:PORT"),
        (0, 2, ":29400", "--master ':29400': give HOST:PORT"),
        (0, 2, "h:70000", "--master 'h:70000': give HOST:PORT"),
    ],
)
def test_a_layout_that_cannot_be_is_refused(rank, nnodes, master, said):
    with pytest.raises(ValueError, match="^" + re.escape(said)):
        launch.Layout.parse(rank, nnodes, master)


def _launcher(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "validators.launch", "--nproc", "1", *args],
        capture_output=True, text=True, cwd=ROOT, env=env(), timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ("--node-rank", "0", "--nnodes", "2"),  # no --master
        ("--node-rank", "0", "--nnodes", "2", "--master", "h:1", "--torchrun=--standalone"),
        ("--node-rank", "5", "--nnodes", "2", "--master", "h:1"),
    ],
)
def test_the_launcher_refuses_a_partial_or_impossible_layout(args):
    r = _launcher(*args, "--no-host-checks")
    assert r.returncode == 2, r.stderr
    assert "validators.launch: error: --" in r.stderr and "Traceback" not in r.stderr


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_every_worker_exiting_0_is_a_clean_end():
    envs = [launch.Layout.parse(0, 1, "127.0.0.1:1").worker_env(3, i) for i in range(3)]
    out = _Sink()
    proc = launch.run_workers(_py("import os; print('rank', os.environ['RANK'])"), envs, 30, out)
    assert (proc.rc, proc.timed_out, proc.cause) == (0, False, None)
    assert sorted(out.lines) == ["rank 0", "rank 1", "rank 2"]


def test_the_first_failure_ends_the_node_and_is_named():
    """Rank 1 raises; rank 0 would wait forever (as a rank waits for a dead peer in a
    collective): it is stopped at once, and the cause is rank 1's, with its error's last line."""
    code = (
        "import os, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    time.sleep(0.5); raise RuntimeError('lost the checkpoint directory')\n"
        "time.sleep(600)\n"
    )
    envs = [launch.Layout.parse(0, 1, "127.0.0.1:1").worker_env(2, i) for i in range(2)]
    t0 = time.monotonic()
    proc = launch.run_workers(_py(code), envs, 120, _Sink(), grace_s=5)
    assert time.monotonic() - t0 < 30
    assert proc.rc == 1 and not proc.timed_out
    host = socket.gethostname()
    assert proc.cause == (
        f"rank 1 on {host} failed: exit code 1; RuntimeError: lost the checkpoint directory"
    )
    assert proc.launcher == "the workers"


def test_a_killed_worker_is_named_with_its_signal():
    code = "import os, signal, time\nos.kill(os.getpid(), signal.SIGKILL)\n"
    envs = [launch.Layout.parse(1, 2, "127.0.0.1:1").worker_env(1, 0)]
    proc = launch.run_workers(_py(code), envs, 60, _Sink())
    assert proc.cause == f"rank 1 on {socket.gethostname()} failed: exit code -9 (SIGKILL)"


def test_the_deadline_stops_every_worker():
    envs = [launch.Layout.parse(0, 1, "127.0.0.1:1").worker_env(2, i) for i in range(2)]
    t0 = time.monotonic()
    proc = launch.run_workers(_py("import time; time.sleep(600)"), envs, 1.5, _Sink(), grace_s=2)
    assert time.monotonic() - t0 < 20
    assert proc.timed_out and proc.rc is None and proc.cause is None
    check = launch._job_check(proc, None, 1.5)
    assert check.status == FAIL and "passed its 1.5 s deadline" in check.detail


class _Sink:
    def __init__(self):
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines += [line for line in text.splitlines() if line]

    def flush(self) -> None:
        pass


def _two_nodes(tmp_path, *job_args: str) -> list[tuple[int, dict, str]]:
    """Two launchers, as two Slurm tasks (one per node) start them, one worker each. The
    checkpoint directory is one path on every node, each node's own storage, as the role gives
    it: here each launcher's own directory, bound at that path in a mount namespace of its own.
    Each node's exit status, report and output."""
    master = f"127.0.0.1:{free_port()}"
    ck = tmp_path / "ck"
    ck.mkdir()
    procs = []
    for rank in (0, 1):
        own = tmp_path / f"ck{rank}"
        own.mkdir()
        cmd = ["unshare", "-m", "sh", "-c", f'mount --bind {own} {ck} && exec "$@"', "sh",
               sys.executable, "-m", "validators.launch", "--nproc", "1", "--no-host-checks",
               "--node-rank", str(rank), "--nnodes", "2", "--master", master,
               "--json", str(tmp_path / f"node{rank}.json"), "--timeout-s", "150", "--",
               "--steps", "10", "--allreduce-max-mb", "0.25", "--checkpoint-dir", str(ck),
               *job_args]  # fmt: skip
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=200)[0] for p in procs]
    docs = [json.loads((tmp_path / f"node{rank}.json").read_text()) for rank in (0, 1)]
    return [(p.returncode, doc, out) for p, doc, out in zip(procs, docs, outs, strict=True)]


def _checks(doc: dict) -> dict:
    return {c["name"]: c for c in doc["checks"]}


@pytest.mark.slow
@pytest.mark.skipif(not MOUNTS, reason="needs a private mount namespace (root)")
def test_two_nodes_each_start_their_worker_and_both_pass(tmp_path):
    """Node 1's worker finds the store node 0's hosts, both reports end complete, and the
    job's all-reduce and checkpoint round trip span both."""
    for rc, doc, out in _two_nodes(tmp_path):
        by = _checks(doc)
        assert rc == 0 and doc["complete"], out[-3000:]
        assert by["job_completed"]["status"] == PASS
        assert by["job_completed"]["detail"] == (
            "all 2 ranks reached the end of the job; the workers exit 0"
        )
        assert by["checkpoint_roundtrip"]["status"] == PASS
        assert doc["job"]["world_size"] == 2
        assert set(doc["launch_s"]) == {"workers", "until_job_started"}


@pytest.mark.slow
@pytest.mark.skipif(not MOUNTS, reason="needs a private mount namespace (root)")
def test_a_rank_killed_on_one_node_fails_both_nodes(tmp_path):
    """Rank 1 is killed at step 3: its node names it and the signal; node 0's worker, left
    waiting on its peer, fails too (never a pass for half a job), and both end well before
    their deadline."""
    t0 = time.monotonic()
    (rc0, doc0, out0), (rc1, doc1, out1) = _two_nodes(
        tmp_path, "--fault-kill-rank", "1", "--fault-step", "3", "--collective-timeout-s", "20"
    )
    assert time.monotonic() - t0 < 120
    job1 = _checks(doc1)["job_completed"]
    assert rc1 == 1 and job1["status"] == FAIL, out1[-3000:]
    assert job1["detail"].startswith(
        f"rank 1 on {socket.gethostname()} failed: exit code -9 (SIGKILL); "
    )
    job0 = _checks(doc0)["job_completed"]
    assert rc0 == 1 and job0["status"] == FAIL, out0[-3000:]
    # rank 0's own error, not its traceback's frames (torch prefixes each line "[rank0]: ")
    assert re.match(
        rf"rank 0 on {re.escape(socket.gethostname())} failed: exit code 1; RuntimeError: ",
        job0["detail"],
    ), job0["detail"]
    assert not doc0["complete"] and not doc1["complete"]
