"""The shared tier's host checks (storage.shared), run by validators.hostcheck on each node:

- `shared_read`: a dataset shard read from the tier with the node's cached pages dropped first
  (posix_fadvise DONTNEED), bounded in time, against what the node's GPUs consume (the plan's
  tokens/s per node x bytes per token). It reads the dataset files themselves where the
  datasets directory holds some, else a probe file it writes once under
  `<mount>/.rackform/<node>/`.
- `shared_visible`: the tier really is one file system: each node writes a token under
  `<mount>/.rackform/validate/<run>/<node>/token` and must read back, within a deadline, the token
  every other node of the run wrote (a node that mounted nothing writes to its own disk and
  sees nobody; a token left by an earlier run is refused by its run id and time).

Anyone who can write to the tier can make `<mount>/.rackform/...` before a node does, and the
checks run as root: every directory is opened without following a link, the node's own one is
refused unless it is its own and no one else can write into it, and every file is created new
in it and renamed into place (validators/nofollow.py). A refused directory fails the check with
the reason, never with a figure measured on something else.

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import socket
import time
from collections.abc import Sequence

from validators import nofollow
from validators.report import PASS, Check, compare, failed, not_run

BLOCK = 8 << 20
PROBE_DIR = ".rackform"
PROBE = "read-probe"
TOKEN = "token"
# The smallest read worth timing: below it, open and metadata round trips are the figure.
MIN_READ_MB = 16


def _files(directory: str, limit: int) -> list[str]:
    """Regular files under `directory` (hidden ones skipped), by name, until `limit` bytes."""
    out, total = [], 0
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = os.path.join(root, name)
            if name.startswith(".") or not os.path.isfile(path) or os.path.islink(path):
                continue
            out.append(path)
            total += os.path.getsize(path)
            if total >= limit:
                return out
    return out


@contextlib.contextmanager
def shared_dir(mount: str, *parts: str):
    """`<mount>/.rackform/<parts...>`, open (an fd) for the block: each level made writable by
    every node where missing (sticky, 1777: on a tier that maps every node's root to nobody,
    NFS's root_squash, a directory one node made with the usual 0755 would refuse the next
    node's files), none of them a link. The mount itself is the blueprint's and is followed."""
    # O_PATH: the mount is only walked through (an export's root may grant search, not read).
    fds = [os.open(mount, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC)]
    try:
        path = mount
        for part in (PROBE_DIR, *parts):
            path = os.path.join(path, part)
            fds.append(nofollow.shared_dir(part, fds[-1], shown=path))
        yield fds[-1], path
    finally:
        for fd in fds:
            os.close(fd)


def _drop(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


@contextlib.contextmanager
def own_dir(base: tuple[int, str], node: str):
    """This node's own directory under `base` (a `shared_dir`), open for the block: its files
    go there, never straight into a sticky directory another node made (as root under
    root_squash a node is nobody on the tier, and Linux's fs.protected_regular refuses root's
    open of a file nobody made in a sticky directory someone else owns). Refused (nofollow.Unsafe)
    where it is a link or not the node's own (validators/nofollow.py)."""
    fd, path = base
    name = node or socket.gethostname()
    mine = nofollow.own_dir(name, fd, shown=os.path.join(path, name))
    try:
        yield mine, os.path.join(path, name)
    finally:
        os.close(mine)


def _probe(mount: str, node: str, size: int) -> int:
    """An fd, open for reading at its start, of the probe file: written once, full size,
    flushed to the tier, and read again on later runs only where it is still this node's own
    regular file of that size."""
    with shared_dir(mount) as base, own_dir(base, node) as (d, path):
        owner = os.fstat(d).st_uid
        try:
            fd = nofollow.open_file(PROBE, d, owner, shown=os.path.join(path, PROBE))
            if os.fstat(fd).st_size == size:
                return fd
            os.close(fd)
        except (FileNotFoundError, nofollow.Unsafe):
            pass  # written anew: the rename below replaces whatever is at the name
        fd, tmp = nofollow.create(f".{PROBE}.", d, 0o644)
        try:
            block = os.urandom(1 << 20) * (BLOCK >> 20)
            left = size
            while left > 0:
                left -= os.write(fd, block[: min(left, BLOCK)])
            os.fsync(fd)
            os.replace(tmp, PROBE, src_dir_fd=d, dst_dir_fd=d)
            os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=d)
            raise
        return fd


def read_check(
    mount: str,
    datasets: str | None,
    total_mb: int,
    minimum: float | None,
    timeout_s: float,
    node: str = "",
) -> Check:
    name, unit = "shared_read", "GB/s"
    if total_mb <= 0:
        return not_run(
            name, "shared read probe disabled (--shared-read-mb 0)", unit=unit, node=node
        )
    limit = total_mb << 20
    try:
        files = _files(datasets, limit) if datasets and os.path.isdir(datasets) else []
        if sum(os.path.getsize(f) for f in files) < MIN_READ_MB << 20:
            files, what = [_probe(mount, node, limit)], "a probe file (no dataset files to read)"
        else:
            what = f"{len(files)} dataset file(s) under {datasets}"
        got, start = 0, time.monotonic()
        for path in files:
            with open(path, "rb", buffering=0) as f:
                _drop(f.fileno())
                while got < limit:
                    chunk = f.read(BLOCK)
                    got += len(chunk)
                    if not chunk or time.monotonic() - start >= timeout_s:
                        break
            if got >= limit or time.monotonic() - start >= timeout_s:
                break
        seconds = time.monotonic() - start
    except nofollow.Unsafe as e:
        return failed(name, e.strerror, expected=minimum, unit=unit, op=">=", node=node)
    except OSError as e:
        return failed(
            name, f"reading {mount}: {e}", expected=minimum, unit=unit, op=">=", node=node
        )
    if got == 0 or seconds <= 0:
        return failed(
            name, f"nothing read from {mount}", expected=minimum, unit=unit, op=">=", node=node
        )
    detail = f"{got >> 20} MiB of {what} in {seconds:.1f} s, cached pages dropped"
    return compare(
        name,
        round(got / seconds / 1e9, 3),
        minimum,
        unit,
        detail=detail,
        node=node,
        no_threshold="no data rate to compare with (no training workload, or datasets not on the tier)",
    )


def visible_check(
    mount: str, run: str, node: str, peers: Sequence[str], wait_s: float, poll_s: float = 0.5
) -> Check:
    name = "shared_visible"
    if not run or not node or not peers:
        return not_run(name, "no run id, node name or peers given", node=node)
    d = os.path.join(mount, PROBE_DIR, "validate", run)  # what shared_dir makes (or finds)
    start = time.time()
    token = {"node": node, "run": run, "host": socket.gethostname(), "time": start}
    others = [p for p in peers if p != node]
    try:
        with shared_dir(mount, "validate", run) as base:
            owner = _write_token(base, node, token)
            seen = _wait_for(base[0], others, run, start, nodes_owners(owner), wait_s, poll_s)
    except nofollow.Unsafe as e:
        return failed(
            name, e.strerror, measured="unwritable", expected="shared", op="==", node=node
        )
    except OSError as e:
        return failed(
            name,
            f"writing to {d}: {e}",
            measured="unwritable",
            expected="shared",
            op="==",
            node=node,
        )
    missing = [p for p in others if p not in seen]
    measured = f"{len(seen) + 1}/{len(others) + 1} nodes"
    if missing:
        return failed(
            name,
            f"{mount} on {node} never showed the file{'s' if len(missing) > 1 else ''} that "
            f"{', '.join(missing)} wrote there in {wait_s:g} s: it is not the same file system",
            measured=measured,
            expected=f"{len(others) + 1}/{len(others) + 1} nodes",
            op="==",
            node=node,
        )
    return Check(
        name, PASS, measured, measured, "", "==", f"every node's file read back on {mount}", node
    )


def _write_token(base: tuple[int, str], node: str, token: dict) -> int:
    """This node's token, written new in its own directory and renamed into place; the uid the
    tier gave it (what every node of the run writes as: a peer's token must be owned by it)."""
    with own_dir(base, node) as (d, _path):
        fd, tmp = nofollow.create(".token.", d, 0o644)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(token, f)
                f.flush()
                os.fsync(f.fileno())
                owner = os.fstat(f.fileno()).st_uid
            os.replace(tmp, TOKEN, src_dir_fd=d, dst_dir_fd=d)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=d)
            raise
    return owner


def _wait_for(
    run_fd: int,
    others: list[str],
    run: str,
    start: float,
    owners: frozenset[int],
    wait_s: float,
    poll_s: float,
) -> set[str]:
    """The peers whose fresh token this node reads under the run's directory within `wait_s`."""
    seen: set[str] = set()
    while True:
        # Listing the directory revalidates it (NFS's close-to-open): a peer's new file is seen
        # at once instead of after the client's cached "no such file" expires (up to acdirmax).
        with contextlib.suppress(OSError):
            os.listdir(run_fd)
        for peer in others:
            if peer not in seen and _fresh(run_fd, peer, run, start, owners):
                seen.add(peer)
        if len(seen) == len(others) or time.time() - start >= wait_s:
            return seen
        time.sleep(poll_s)


# A token counts if it names its node and this run and was written around this check (a run
# repeated later with the same id must not pass on what an earlier one left), and if it is a
# regular file (no link) owned as a node's token is: by root, or by the uid root's files get on
# the tier (this node's own token's owner; nobody, where an NFS export squashes root). A node
# that serves the export writes as root while its clients' tokens arrive as nobody, so each of
# these counts on every node; one a user of the tier wrote for a peer (its own uid) does not.
FRESH_S = 600


def nodes_owners(own: int) -> frozenset[int]:
    """The uids a node's token may be owned by on the tier: root, this node's own token's, and
    the uid an export squashes root to (nobody)."""
    owners = {0, own}
    for name in ("nobody", "nfsnobody"):
        with contextlib.suppress(KeyError):
            owners.add(pwd.getpwnam(name).pw_uid)
    return frozenset(owners)


def _fresh(run_fd: int, peer: str, run: str, start: float, owners: frozenset[int]) -> bool:
    try:
        d = os.open(peer, nofollow.DIR, dir_fd=run_fd)
    except OSError:
        return False
    try:
        fd = nofollow.open_file(TOKEN, d)
        if os.fstat(fd).st_uid not in owners:
            os.close(fd)
            return False
        with open(fd, encoding="utf-8") as f:
            t = json.load(f)
    except (OSError, ValueError):
        return False
    finally:
        os.close(d)
    if not isinstance(t, dict) or t.get("node") != peer or t.get("run") != run:
        return False
    at = t.get("time")
    return isinstance(at, int | float) and abs(at - start) <= FRESH_S
