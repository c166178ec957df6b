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

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Sequence

from validators.report import PASS, Check, compare, failed, not_run

BLOCK = 8 << 20
PROBE_DIR = ".rackform"
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


def shared_dir(mount: str, *parts: str) -> str:
    """`<mount>/.rackform/<parts...>`, each level made writable by every node (sticky, 1777):
    on a tier that maps every node's root to nobody (NFS's root_squash), a directory one node
    made with the usual 0755 would refuse the next node's files."""
    path = mount
    for part in (PROBE_DIR, *parts):
        path = os.path.join(path, part)
        # Looked up first: an NFS server answers mkdir in a directory the node may not write
        # to (the export's root, under root_squash) with EACCES even where the entry exists.
        if os.path.isdir(path):
            continue
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        os.chmod(path, 0o1777)  # mkdir's mode passes through the umask; chmod does not
    return path


def _drop(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def own_dir(base: str, node: str) -> str:
    """This node's own directory under `base` (a `shared_dir`): its files go there, never
    straight into a sticky directory another node made. As root under root_squash a node is
    nobody on the tier, and the file it makes there comes back owned by nobody, neither the
    directory's owner nor root: Linux's fs.protected_regular (2 on Debian) then refuses root's
    open of it, O_EXCL or not (seen on the testbed's NFS). In its own directory it is the owner."""
    path = os.path.join(base, node or socket.gethostname())
    with contextlib.suppress(FileExistsError):
        if not os.path.isdir(path):
            os.mkdir(path)
    return path


def _probe(mount: str, node: str, size: int) -> str:
    """The probe file (written once, full size, flushed to the tier)."""
    path = os.path.join(own_dir(shared_dir(mount), node), "read-probe")
    if os.path.exists(path) and os.path.getsize(path) == size:
        return path
    block = os.urandom(1 << 20) * (BLOCK >> 20)
    with open(path + ".tmp", "wb") as f:
        left = size
        while left > 0:
            left -= f.write(block[: min(left, BLOCK)])
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    return path


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
    try:
        mine = own_dir(shared_dir(mount, "validate", run), node)
        with open(os.path.join(mine, ".token.tmp"), "w", encoding="utf-8") as f:
            json.dump(token, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(os.path.join(mine, ".token.tmp"), os.path.join(mine, TOKEN))
    except OSError as e:
        return failed(
            name,
            f"writing to {d}: {e}",
            measured="unwritable",
            expected="shared",
            op="==",
            node=node,
        )
    others = [p for p in peers if p != node]
    seen: set[str] = set()
    while True:
        # Listing the directory revalidates it (NFS's close-to-open): a peer's new file is seen
        # at once instead of after the client's cached "no such file" expires (up to acdirmax).
        with contextlib.suppress(OSError):
            os.listdir(d)
        for peer in others:
            if peer not in seen and _fresh(os.path.join(d, peer, TOKEN), peer, run, start):
                seen.add(peer)
        if len(seen) == len(others) or time.time() - start >= wait_s:
            break
        time.sleep(poll_s)
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


# A token counts if it names its node and this run and was written around this check (a run
# repeated later with the same id must not pass on what an earlier one left).
FRESH_S = 600


def _fresh(path: str, peer: str, run: str, start: float) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(t, dict) or t.get("node") != peer or t.get("run") != run:
        return False
    at = t.get("time")
    return isinstance(at, int | float) and abs(at - start) <= FRESH_S
