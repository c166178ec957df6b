"""The stack's lock on the controller (rackform/scheduler/lease.py), with the real bash and
flock: on this machine through the Local runner, and through ssh (tests/fake_ssh.py runs the
remote command line as sshd would). Each case tries what would fool a lock: a second run from
another state directory, a holder killed outright, a holder frozen (its host or network gone),
a controller where the lock cannot be taken at all."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fake_ssh import install

from rackform.lifecycle.lease import controller_lock
from rackform.lifecycle.lock import Held
from rackform.scheduler.remote import Local, RemoteError, Ssh

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    """The controller user's home, where the lock lives (~/.rackform-locks): the test's own."""
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture
def stack():
    return f"gpu-train-{uuid.uuid4().hex[:8]}-prod"


def holder(
    stack: str, lease_s: int = 2, beat_s: float = 0.5, purpose: str = "heal"
) -> subprocess.Popen:
    """Another process (another run, as on another host) holding the lock until killed."""
    code = (
        "import sys, time\n"
        "from rackform.lifecycle.lease import controller_lock\n"
        "from rackform.scheduler.remote import Local\n"
        f"with controller_lock(Local(), {stack!r}, {purpose!r}, lease_s={lease_s},"
        f" beat_s={beat_s}):\n"
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
    for tool in ("bash", "cat", "rm", "id", "stat", "mkdir", "head"):
        os.symlink(subprocess.check_output(["which", tool], text=True).strip(), bin_ / tool)
    no_flock = Local({"PATH": str(bin_), "HOME": os.environ["HOME"]})
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


def test_the_holders_words_are_shown_escaped(stack):
    # Whatever the holder's line holds (an escape code that clears the operator's screen, a
    # newline that would fake a second message), it is shown as one escaped line.
    p = holder(stack, lease_s=60, purpose="heal\x1b[2J\x1b[H\nall clear: nothing holds it\t\x07")
    try:
        with pytest.raises(Held) as held, controller_lock(Local(), stack, "rollout"):
            pytest.fail("taken twice")
    finally:
        p.kill()
    said = str(held.value)
    assert "heal\\x1b[2J\\x1b[H\\nall clear: nothing holds it\\t\\x07: pid" in said, said
    assert said.isprintable()


def test_the_lock_is_kept_in_a_directory_only_its_user_writes(stack, home):
    with controller_lock(Local(), stack, "heal"):
        locks = home / ".rackform-locks"
        assert stat.S_IMODE(locks.stat().st_mode) == 0o700
        assert (locks / f"{stack}.lock").exists()
        assert (locks / f"{stack}.lock.who").read_text().startswith("heal: pid")
    assert not (locks / f"{stack}.lock.who").exists()


@pytest.mark.parametrize("where", ["locks", "home"])
def test_a_lock_directory_others_can_write_is_refused(stack, home, where):
    locks = home / ".rackform-locks"
    locks.mkdir(mode=0o700)
    os.chmod(locks if where == "locks" else home, 0o1777)
    with (
        pytest.raises(RemoteError, match="is writable by others \\(drwxrwxrwt\\): refusing"),
        controller_lock(Local(), stack, "heal"),
    ):
        pytest.fail("a lock others could hold or forge")
    assert list(locks.iterdir()) == []


def test_a_link_in_place_of_the_lock_directory_is_refused(stack, home, tmp_path):
    elsewhere = tmp_path / "run-lock"
    elsewhere.mkdir(mode=0o1777)
    (home / ".rackform-locks").symlink_to(elsewhere)
    with (
        pytest.raises(RemoteError, match="is a symbolic link: refusing"),
        controller_lock(Local(), stack, "heal"),
    ):
        pytest.fail("a lock in a directory others write")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_a_lock_directory_another_user_owns_is_refused(stack, home):
    locks = home / ".rackform-locks"
    locks.mkdir(mode=0o700)
    os.chown(locks, 4242, 4242)
    with (
        pytest.raises(RemoteError, match="is owned by uid 4242, not by uid 0 or root"),
        controller_lock(Local(), stack, "heal"),
    ):
        pytest.fail("a lock another user could hold")
