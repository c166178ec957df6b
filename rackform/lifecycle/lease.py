"""A stack's lock held on its Slurm controller, where every run against the cluster sees it:
a cron host and a CI runner acting on one cluster each find the other's lock, which a file in
either's own state directory cannot show. A run that finds it taken gets the same `Held` as one
that finds the state directory's lock taken.

The lock is an flock(1) on `~/.rackform-locks/<stack>.lock` in the home of the user rackform
reaches the controller as (the plan's SSH user), held by a shell the holder keeps open over SSH
for as long as it runs. It is a lease: the holder writes a line every `beat_s` seconds, and the
shell lets go once none has come for `lease_s` (the holder killed, its host gone, the network
cut), or at once when the connection closes. Who holds it (this host, pid, since when, for
what) is written beside it, and a run that finds it held names that holder, its words escaped:
nothing another party wrote reaches the operator's terminal as control characters.

Only that user (and root) may write where the lock is: the home and `~/.rackform-locks` (made
0700, a directory of its own: whatever else keeps files in the home decides nothing) must be
that user's or root's and writable by neither the group nor others, and neither may be a link,
else no lock is taken (an error, never a lock). A lock in a directory every user of the
controller can write (the distribution's /run/lock, where it was before) could be held, or
its holder's words chosen, by any of them.
bash, flock (util-linux) and stat (coreutils) on the controller: in every Debian and Ubuntu
install.
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

from rackform.lifecycle.lock import Held
from rackform.printable import printable
from rackform.scheduler.remote import SSH_FAILED, RemoteError, Runner

# Where the lock lives on the controller, under the SSH user's home.
LOCK_DIR = ".rackform-locks"
# At most this much of a holder's words is read and shown.
WHO_BYTES = 512

# $1 the stack, $2 who takes it, $3 the lease in seconds. Prints `locked`; or `held` and, on
# the lines after, the holder's words (exit 75); or why it cannot (stderr, exit 70).
HOLD = r"""
fail() { echo "$*" >&2; exit 70; }
case "$1" in ''|.*|*/*) fail "the stack name $1 cannot name a lock file";; esac
[ -n "${HOME:-}" ] && [ -d "$HOME" ] || fail "no home directory to keep the lock in"
me=$(id -u)
d="$HOME/__LOCK_DIR__"
[ -L "$d" ] && fail "$d is a symbolic link: refusing to keep the lock there"
[ -d "$d" ] || mkdir -m 700 "$d" 2>/dev/null || [ -d "$d" ] || fail "cannot make $d"
for d in "$HOME" "$HOME/__LOCK_DIR__"; do
  owner=$(stat -L -c %u "$d") && mode=$(stat -L -c %A "$d") || fail "cannot read $d"
  [ "$owner" = "$me" ] || [ "$owner" = 0 ] ||
    fail "$d is owned by uid $owner, not by uid $me or root: refusing to keep the lock there"
  case "$mode" in ?????w*|????????w*)
    fail "$d is writable by others ($mode): refusing to keep the lock there";;
  esac
done
f="$HOME/__LOCK_DIR__/$1.lock"
[ -L "$f" ] || [ -L "$f.who" ] && fail "$f or $f.who is a symbolic link: refusing it"
exec 9>>"$f" || fail "cannot open $f"
flock -n -E 75 9; rc=$?
if [ "$rc" = 75 ]; then
  echo held; head -c __WHO_BYTES__ "$f.who" 2>/dev/null || echo 'another run'; exit 75
fi
if [ "$rc" != 0 ]; then fail "flock failed (exit $rc) on $f"; fi
printf '%s\n' "$2" > "$f.who" 2>/dev/null
echo locked
while read -r -t "$3" _; do :; done
rm -f "$f.who"
""".replace("__LOCK_DIR__", LOCK_DIR).replace("__WHO_BYTES__", str(WHO_BYTES))


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
        if line == "held":
            holder = printable(_rest(proc).strip(), WHO_BYTES) or "another run"
            raise Held(f"{stack}: held on {runner.where} by {holder}")
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


def _rest(proc: subprocess.Popen) -> str:
    """What the lock script printed after its first line (it has exited, or does at once)."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return ""
    return proc.stdout.read(4 * WHO_BYTES)


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
