"""The one lock: a second run finds it held and is told who holds it (their words escaped), the
words go when the holder lets go, and a waiting writer takes its turn."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from rackform.lifecycle.lock import FileLock, Held


def test_a_second_run_is_told_who_holds_it_and_can_take_it_after(tmp_path):
    lock = FileLock(tmp_path / "d" / "s.lock", lambda who: f"s: held ({who})")
    with lock.hold():
        assert (tmp_path / "d" / "s.lock").read_text().startswith(f"pid {os.getpid()} since ")
        assert oct((tmp_path / "d" / "s.lock").stat().st_mode & 0o777) == "0o600"
        with pytest.raises(Held, match=rf"^s: held \(pid {os.getpid()} since 20"), lock.hold():
            pass
        with pytest.raises(Held, match=r"s.lock is held by pid "), FileLock(lock.path).hold():
            pass
    assert (tmp_path / "d" / "s.lock").read_text() == ""
    with lock.hold():
        pass


def test_another_process_holding_it_is_named_and_its_words_escaped(tmp_path):
    path = tmp_path / "s.lock"
    code = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, b'evil\\x1b[2Jwords')\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(Held) as held, FileLock(path).hold():
            pass
        assert "\x1b" not in str(held.value) and "evil" in str(held.value)
    finally:
        p.stdin.close()
        p.wait(timeout=10)
    with FileLock(path).hold():  # let go with its process
        pass


def test_a_waiting_writer_takes_its_turn(tmp_path):
    lock, order = FileLock(tmp_path / "w.lock"), []

    def second():
        with lock.wait():
            order.append("second")

    with lock.wait():
        t = threading.Thread(target=second)
        t.start()
        t.join(0.3)
        order.append("first")
    t.join(5)
    assert order == ["first", "second"]
