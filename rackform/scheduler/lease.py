"""A stack's lock held on its Slurm controller, where every run against the cluster sees it:
a cron host and a CI runner acting on one cluster each find the other's lock, which a file in
either's own state directory cannot show.

The lock is an flock(1) on `/run/lock/rackform-<stack>.lock` on the controller (the distribution's
lock directory, world-writable and sticky, emptied at boot), held by a shell the holder keeps
open over SSH for as long as it runs. It is a lease: the holder writes a line every `beat_s`
seconds, and the shell lets go once none has come for `lease_s` (the holder killed, its host
gone, the network cut), or at once when the connection closes. Who holds it (this host, pid,
since when, for what) is written beside it, and a run that finds it held names that holder.
bash and flock (util-linux) on the controller: both in every Debian and Ubuntu install.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rackform.scheduler.remote import SSH_FAILED, RemoteError, Runner

# $1 the stack, $2 who takes it, $3 the lease in seconds. Prints `locked`, or `held: WHO` (75).
HOLD = r"""
d=/run/lock; [ -d "$d" ] && [ -w "$d" ] || d=/tmp
f="$d/rackform-$1.lock"
{ exec 9>>"$f"; } 2>/dev/null || exec 9<"$f" || { echo "cannot open $f" >&2; exit 70; }
flock -n -E 75 9; rc=$?
if [ "$rc" = 75 ]; then echo "held: $(cat "$f.who" 2>/dev/null || echo 'another run')"; exit 75; fi
if [ "$rc" != 0 ]; then echo "flock failed (exit $rc) on $f" >&2; exit 70; fi
printf '%s\n' "$2" > "$f.who" 2>/dev/null
echo locked
while read -r -t "$3" _; do :; done
rm -f "$f.who"
"""


class Held(Exception):
    """Another run holds the stack's lock on the controller. One line, naming it."""


def who(purpose: str) -> str:
    return (
        f"{purpose}: pid {os.getpid()} on {socket.gethostname()} since "
        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
    )


@contextmanager
def controller_lock(
    runner: Runner,
    stack: str,
    purpose: str,
    *,
    lease_s: float = 60,
    beat_s: float = 10,
    timeout_s: float = 30,
) -> Iterator[None]:
    """Hold `stack`'s lock on the controller `runner` reaches while the block runs; Held where
    another run has it, RemoteError where the controller cannot be asked (then nothing may act:
    an unknown lock is never taken for a free one)."""
    proc = runner.hold(HOLD, [stack, who(purpose), str(int(lease_s))])
    try:
        line = _first_line(proc, timeout_s)
        if line.startswith("held: "):
            raise Held(f"{stack}: held on {runner.where} by {line[6:]}")
        if line != "locked":
            try:
                proc.wait(timeout=10)
                err = proc.stderr.read().strip()
            except subprocess.TimeoutExpired:
                err = ""
            last = err.splitlines()[-1] if err else line or f"exited {proc.returncode}"
            if proc.returncode == SSH_FAILED:
                raise RemoteError(f"{runner.where} is not reachable over SSH: {last}")
            raise RemoteError(f"cannot take {stack}'s lock on {runner.where}: {last}")
        stop = threading.Event()
        beat = threading.Thread(target=_beat, args=(proc, stop, beat_s), daemon=True)
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()
    finally:
        _release(proc)


def _first_line(proc: subprocess.Popen, timeout_s: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        raise RemoteError(f"no answer about the lock in {timeout_s:g} s")
    return proc.stdout.readline().strip()


def _beat(proc: subprocess.Popen, stop: threading.Event, beat_s: float) -> None:
    while not stop.wait(beat_s):
        try:
            proc.stdin.write("\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return  # the holder's shell is gone: the lease lapses by itself


def _release(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        proc.stdin.close()  # end of input: the shell lets go at once
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for f in (proc.stdout, proc.stderr):
        f.close()
