"""The stack's lock on the controller (rackform/scheduler/lease.py), with the real bash and
flock: on this machine through the Local runner, and through ssh (tests/fake_ssh.py runs the
remote command line as sshd would). Each case tries what would fool a lock: a second run from
another state directory, a holder killed outright, a holder frozen (its host or network gone),
a controller where the lock cannot be taken at all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fake_ssh import install

from rackform.scheduler.lease import Held, controller_lock
from rackform.scheduler.remote import Local, RemoteError, Ssh

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stack():
    return f"gpu-train-{uuid.uuid4().hex[:8]}-prod"  # a name of its own: /run/lock is shared


def holder(stack: str, lease_s: int = 2, beat_s: float = 0.5) -> subprocess.Popen:
    """Another process (another run, as on another host) holding the lock until killed."""
    code = (
        "import sys, time\n"
        "from rackform.scheduler.lease import controller_lock\n"
        "from rackform.scheduler.remote import Local\n"
        f"with controller_lock(Local(), {stack!r}, 'heal', lease_s={lease_s}, beat_s={beat_s}):\n"
        "    print('holding', flush=True)\n"
        "    time.sleep(600)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "holding"
    return p


def taken_within(stack: str, seconds: float) -> float | None:
    """Seconds until this run takes the lock, or None if it did not within `seconds`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            with controller_lock(Local(), stack, "rollout"):
                return time.monotonic() - t0
        except Held:
            time.sleep(0.2)
    return None


def test_a_second_run_finds_the_lock_and_names_its_holder(stack):
    with controller_lock(Local(), stack, "heal"):
        with pytest.raises(Held) as held, controller_lock(Local(), stack, "rollout"):
            pytest.fail("taken twice")
        assert str(held.value).startswith(
            f"{stack}: held on this machine by heal: pid {os.getpid()}"
        )
        with controller_lock(Local(), stack + "-b", "rollout"):  # another stack: its own lock
            pass
    with controller_lock(Local(), stack, "rollout"):  # let go at the block's end
        pass


def test_a_holder_killed_outright_lets_go_at_once(stack):
    p = holder(stack, lease_s=60)
    try:
        assert taken_within(stack, 1) is None
        p.kill()
        p.wait()
        took = taken_within(stack, 10)
        assert took is not None and took < 5, took  # its pipe closed: not the 60 s lease
    finally:
        p.kill()


def test_a_frozen_holder_loses_the_lock_when_its_lease_runs_out(stack):
    """A holder that stops beating (SIGSTOP: as a host that hangs, or a network cut, looks
    from the controller) keeps the lock for its lease, then loses it."""
    p = holder(stack, lease_s=2, beat_s=0.5)
    try:
        assert taken_within(stack, 3) is None  # beating: held past its lease
        os.kill(p.pid, signal.SIGSTOP)
        took = taken_within(stack, 15)
        assert took is not None and 1 < took < 8, took
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()


def test_a_controller_without_flock_is_an_error_never_a_lock(stack, tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("bash", "cat", "rm"):
        os.symlink(subprocess.check_output(["which", tool], text=True).strip(), bin_ / tool)
    no_flock = Local({"PATH": str(bin_)})
    with (
        pytest.raises(RemoteError, match="flock failed \\(exit 127\\)"),
        controller_lock(no_flock, stack, "heal"),
    ):
        pytest.fail("a lock that was never taken")


@pytest.fixture
def ssh_on_path(tmp_path, monkeypatch):
    install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(tmp_path / "ssh.log"))


def test_through_ssh_the_script_arrives_whole_and_the_lock_holds(stack, ssh_on_path):
    ssh = Ssh("ops", "10.60.0.11", 2222)
    held = f"held on ops@10.60.0.11:2222 by heal: pid {os.getpid()}"
    with (
        controller_lock(ssh, stack, "heal"),
        pytest.raises(Held, match=held),
        controller_lock(ssh, stack, "reap"),
    ):
        pass


def test_an_unreachable_controller_is_an_error_never_a_lock(stack, ssh_on_path, monkeypatch):
    monkeypatch.setenv("FAKE_SSH_FAIL", "1")
    with (
        pytest.raises(RemoteError, match="Connection refused"),
        controller_lock(Ssh("ops", "10.60.0.11"), stack, "heal"),
    ):
        pytest.fail("a lock that was never taken")
