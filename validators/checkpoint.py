"""A checkpoint round trip with torch.distributed.checkpoint (DCP): save the model and optimizer
to the checkpoint directory, evict the files from the page cache, load them into a copy whose
every byte differs, and compare bit for bit; with write and read GB/s.

The save is DCP's FileSystemWriter (one file per writer thread per rank, fsync'd) with its
files written by storage.DirectFile: O_DIRECT from reused staging blocks, several writes in
flight, so the figure is the disk's and not the page cache's (a copy into fresh cache pages,
then the writeback the fsync waits for). The zip CRC-32 that torch.save adds to every tensor
is off for the save: it is a serial pass over every byte at a few GB/s, the speed of a CPU
core rather than of the array; torch.load never checks it, and the bit-for-bit comparison
checks every byte.

Each node saves a full copy to its own directory with its own ranks (a gloo group per node),
because the checkpoint directory is usually a node-local RAID: every node's array is tested
and no node needs another's files. Every failure is collective within the node group, so no
rank is left waiting in a collective that the others skipped."""

from __future__ import annotations

import contextlib
import math
import os
import resource
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.state_dict import get_state_dict

from validators import storage


@dataclass
class Result:
    path: str
    error: str | None = None  # why the round trip failed, when it did
    bytes: int = 0
    write_s: float | None = None
    read_s: float | None = None
    mismatches: list[str] = field(default_factory=list)
    compared: int = 0
    writer: str = ""  # how the files were written (see _Files.describe)

    @property
    def write_gbps(self) -> float | None:
        return self.bytes / self.write_s / 1e9 if self.write_s else None

    @property
    def read_gbps(self) -> float | None:
        return self.bytes / self.read_s / 1e9 if self.read_s else None


def _flipped(v: Any) -> Any:
    """A copy of a state-dict value in which every byte differs from the original, so a load
    that skips anything cannot go unnoticed."""
    if isinstance(v, torch.Tensor):
        # Contiguous, so that reshape(-1) is a view and the flip lands in `t` itself.
        t = v.detach().clone(memory_format=torch.contiguous_format)
        t.reshape(-1).view(torch.uint8).bitwise_not_()
        return t
    if isinstance(v, dict):
        return {k: _flipped(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_flipped(x) for x in v]
    return v  # plain Python values (lr, betas) are replaced wholesale by the load


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        return torch.equal(
            a.detach().reshape(-1).view(torch.uint8), b.detach().reshape(-1).view(torch.uint8)
        )
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _leaves(v: Any, prefix: str = ""):
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(v, list | tuple):
        for i, x in enumerate(v):
            yield from _leaves(x, f"{prefix}[{i}]")
    else:
        yield prefix, v


def _dir_bytes(path: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())


def _evict(path: str) -> None:
    """Drop the (synced, clean) checkpoint pages from the page cache so the read is a read."""
    for e in os.scandir(path):
        if e.is_file():
            fd = os.open(e.path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _agree(error: str | None, group) -> str | None:
    """Every rank of the node group learns the first error any of them hit."""
    errs: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(errs, error, group=group)
    return next((e for e in errs if e), None)


def roundtrip(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    path: str,
    group,
    leader: bool,
    heartbeat=lambda: None,
    threads: int = 1,
    keep: bool = False,
    copy=None,
) -> Result:
    """Save to `path` (created here; its parent must exist, it must not), read back, compare. `group` holds
    this node's ranks; `leader` is true on one rank of it (it makes and removes the dir).

    `copy` (given on every rank of the job, or on none): a copy of the checkpoint elsewhere
    (ckpt_checks.NodeCopy, to the tier), told on the leader once the checkpoint is written
    (`copy.start(path)`), so it runs while the checkpoint is read back, and waited for before
    the directory is removed (`copy.settle()`: on every rank, whatever the round trip's
    outcome, for it is a collective of the copy's own)."""
    res = Result(path)
    err = None
    if leader:
        try:
            # mkdir, not makedirs: an unmounted checkpoint mount must fail here rather than
            # send the checkpoint to whatever disk holds the empty mount point's parent.
            os.mkdir(path)
        except OSError as exc:
            err = f"cannot create {path}: {exc.strerror or exc} (errno {exc.errno})"
    res.error = _agree(err, group)
    if res.error:
        if copy is not None:  # nothing to copy here; other nodes may have
            copy.settle()
        return res
    try:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        res.error = _save(state, path, group, threads, res, heartbeat)
        if res.error is None and leader and copy is not None:
            copy.start(path)
        if res.error is None:
            res.error = _load_and_compare(state, path, group, leader, res, heartbeat)
    finally:
        dist.barrier(group=group)
        if copy is not None:  # the copy reads the files: they stay until it is done
            copy.settle()
        if leader and not keep:
            shutil.rmtree(path, ignore_errors=True)
    return res


class _Files(FileSystem):
    """DCP's local file system with every file it writes (the data and .metadata) written
    by storage.DirectFile from one set of staging blocks; reads are DCP's own."""

    def __init__(self, blocks: storage.Blocks, depth: int):
        super().__init__()
        self.blocks, self.depth = blocks, depth
        self.written: list[tuple[str, bool]] = []  # (file name, whether O_DIRECT took)

    @contextlib.contextmanager
    def create_stream(self, path, mode: str):
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        f = storage.DirectFile(os.fspath(path), self.blocks, self.depth)
        try:
            yield f
        except BaseException:
            f.abort()
            raise
        f.close()  # on disk (fsync'd) before DCP goes on
        self.written.append((os.path.basename(path), f.direct))

    def describe(self, threads: int) -> str:
        """How this rank's files went to disk, for the report."""
        direct = [d for _name, d in self.written]
        if direct and all(direct):
            how = "O_DIRECT"
        elif any(direct):
            how = "O_DIRECT for some files, the page cache for others"
        else:
            how = "through the page cache (the filesystem refuses O_DIRECT)"
        per = "file" if threads == 1 else "files"
        return (
            f"{threads} {per} per rank, {how}, {self.depth} x {self.blocks.size >> 20} MiB "
            "in flight per file, fsync'd"
        )


def writer(path: str, threads: int, blocks: storage.Blocks, depth: int = storage.DEPTH):
    """The job's checkpoint writer: DCP's FileSystemWriter, `threads` files per rank written
    in parallel, every file through storage.DirectFile and fsync'd."""
    w = dcp.FileSystemWriter(path, thread_count=threads, single_file_per_rank=True)
    if not isinstance(getattr(w, "fs", None), FileSystem):
        raise RuntimeError(f"torch {torch.__version__}: FileSystemWriter has no .fs to replace")
    w.fs = _Files(blocks, depth)
    return w


@contextlib.contextmanager
def _no_crc32():
    """torch.save without its zip CRC-32 (see the module's docstring), restored after."""
    get = getattr(torch.serialization, "get_crc32_options", None)
    if get is None:  # a torch without the switch
        yield
        return
    old = get()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(old)


def save(state, path: str, group, threads: int = 1, timed: Result | None = None) -> str | None:
    """Save `state` to the directory `path` with the job's writer (`threads` files per rank),
    DCP across `group`: every file and the directory are on disk when it returns. None, or why
    it failed (the same on every rank). With `timed`, the write's seconds and how its files went
    to disk are recorded there; the clock starts once the staging blocks are made (their pages
    faulted in) and every rank of the group is ready."""
    blocks = storage.Blocks(storage.BLOCK, threads * (storage.DEPTH + 1))
    try:
        try:
            w = writer(path, threads, blocks)
        except RuntimeError as exc:  # the same on every rank: no rank waits in a barrier
            return f"write failed: {exc}"
        dist.barrier(group=group)
        t0 = time.perf_counter()
        try:
            with _no_crc32():
                dcp.save(state, storage_writer=w, process_group=group)
            storage.fsync_dir(path)  # DCP renames .metadata into place
        # DCP raises the same CheckpointException (a BaseException) on every rank.
        except (Exception, CheckpointException) as exc:
            hint = space_hint(path)
            return f"write failed: {_cause(exc)}" + (f" ({hint})" if hint else "")
        dist.barrier(group=group)
        if timed is not None:
            timed.write_s = time.perf_counter() - t0
            timed.writer = w.fs.describe(threads)
    finally:
        blocks.close()
    return None


def load(state, path: str, group) -> str | None:
    """Load the checkpoint at `path` into `state`, in place (DCP across `group`); None, or why
    it failed."""
    try:
        dcp.load(state, storage_reader=dcp.FileSystemReader(path), process_group=group)
    except (Exception, CheckpointException) as exc:
        return f"read failed: {_cause(exc)}"
    return None


def _save(state, path, group, threads, res: Result, heartbeat) -> str | None:
    err = save(state, path, group, threads, timed=res)
    if err is None:
        heartbeat()
    return err


def _load_and_compare(state, path, group, leader, res: Result, heartbeat) -> str | None:
    err = None
    if leader:
        try:
            res.bytes = _dir_bytes(path)
            _evict(path)
        except OSError as exc:
            err = f"cannot stat/evict {path}: {exc}"
    err = _agree(err, group)
    if err:
        return err
    sizes: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(sizes, res.bytes, group=group)
    res.bytes = max(s or 0 for s in sizes)
    target = _flipped(state)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    err = load(target, path, group)
    if err:
        return err
    dist.barrier(group=group)
    res.read_s = time.perf_counter() - t0
    heartbeat()
    want = dict(_leaves(state))
    got = dict(_leaves(target))
    res.compared = len(want)
    res.mismatches = [k for k, v in want.items() if k not in got or not _same(v, got[k])]
    return None


def _cause(exc: BaseException) -> str:
    """What went wrong, from inside DCP's wrapping: an OSError says what the disk said; any
    other inner exception is named with the first line of its message."""
    seen: set[int] = set()
    stack, inner = [exc], []
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno:
            return f"[Errno {e.errno}] {e.strerror}" + (f": {e.filename}" if e.filename else "")
        failures = getattr(e, "failures", None)  # CheckpointException: {rank: (exc, tb)}
        if isinstance(failures, dict):
            for x in failures.values():
                x = x[0] if isinstance(x, tuple) and x else x
                if isinstance(x, BaseException):
                    stack.append(x)
        elif e is not exc:
            inner.append(e)
        stack.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    e = inner[0] if inner else exc
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def space_hint(path: str) -> str:
    """After a failed write: the free space where it went, and any file-size limit on this
    process, because torch's writer reports a short write without the errno behind it."""
    parts = []
    try:
        st = os.statvfs(os.path.dirname(path.rstrip("/")) or "/")
        parts.append(f"{st.f_bavail * st.f_frsize / 1e9:.2f} GB free there")
    except OSError:
        pass
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY:
        parts.append(f"file size limit (RLIMIT_FSIZE) {soft} bytes")
    return ", ".join(parts)
