"""How the job writes to the checkpoint mount, and how fast the mount can take it.

The storage ceiling: how fast the checkpoint mount takes a sequential direct-IO write, so the
checkpoint's GB/s can be read as a fraction of what the disk can do. fio when it is installed
(several jobs, libaio, 1 MiB blocks); otherwise one Python writer with O_DIRECT. Either is
timed to durable on disk (fsync'd), as the checkpoint is. The probe file is removed afterwards,
whatever happens.

`DirectFile`, the checkpoint's file (checkpoint.py): one new file written front to back past
the page cache, as the probe writes. The bytes are copied into reused page-aligned blocks that
`depth` threads write with O_DIRECT while the next block fills; close() writes the tail, cuts
the padding off and fsyncs. Through the page cache the same bytes cost a copy into freshly
allocated cache pages plus the writeback the closing fsync then waits for, and the probe pays
neither (benchmarks/ckpt_bench.py measures both writers against it).

Standard library only."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import mmap
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

# O_DIRECT wants the buffer, the file offset and the length aligned to the device's logical
# block; 4 KiB covers both 512-byte and 4Kn drives.
ALIGN = 4096
BLOCK = 8 << 20  # bytes per write, as the Python probe writes
# Writes in flight per file: one block on its way to the disk while the next one fills. Two in
# flight wrote 5-10% slower than one on the 2-core test VM (each extra block is more memory for
# the disk to read from); a GPU node gets its depth from several writer threads, each with its
# own file (--checkpoint-threads).
DEPTH = 1


class Blocks:
    """Page-aligned staging blocks (anonymous mappings are page-aligned, as O_DIRECT needs),
    faulted in once when made and lent to every file of a save in turn: a write never waits
    for fresh memory."""

    def __init__(self, size: int = BLOCK, count: int = 0):
        if size <= 0 or size % ALIGN:
            raise ValueError(f"block size {size} is not a positive multiple of {ALIGN}")
        self.size = size
        self._lock = threading.Lock()
        self._free = [self._new() for _block in range(count)]

    def _new(self) -> mmap.mmap:
        buf = mmap.mmap(-1, self.size)
        buf.write(bytes(self.size))  # touch every page now, not while a write is timed
        return buf

    def take(self, n: int) -> list[mmap.mmap]:
        with self._lock:
            got, self._free = self._free[:n], self._free[n:]
        return got + [self._new() for _block in range(n - len(got))]

    def give(self, bufs: Iterable[mmap.mmap]) -> None:
        with self._lock:
            self._free.extend(bufs)

    def close(self) -> None:
        with self._lock:
            free, self._free = self._free, []
        for b in free:
            b.close()


class DirectFile(io.RawIOBase):
    """A new file written front to back; see the module's docstring. Where the filesystem
    refuses O_DIRECT (EINVAL, at open or at the first write: tmpfs, some network filesystems)
    the same path writes through the page cache; `direct` says which it was. A write error
    in a writer thread is raised, with its errno, by the next write() or by close()."""

    _fd = -1  # until the file is open: close() then has nothing to finish

    def __init__(
        self,
        path: str,
        blocks: Blocks | None = None,
        depth: int = DEPTH,
        exclusive: bool = False,
    ):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth {depth} is below 1")
        self.path = path
        self._own = blocks is None
        self._blocks = blocks or Blocks()
        self._size = self._blocks.size
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._error: OSError | None = None
        self._jobs: list[tuple[mmap.mmap, int, int] | None] = []
        self._pos = 0  # bytes written by the caller
        self._fill = 0  # of them, in the block being filled
        self._threads: list[threading.Thread] = []
        self._all = self._blocks.take(depth + 1)
        self._free = list(self._all)
        self._cur = self._free.pop()
        self._view = memoryview(self._cur)
        self.direct = self._open(path, exclusive)  # sets _fd
        self._threads = [
            threading.Thread(target=self._writer, daemon=True) for _thread in range(depth)
        ]
        for t in self._threads:
            t.start()

    def _open(self, path: str, exclusive: bool) -> bool:
        """Open for O_DIRECT where the filesystem takes it; whether it did."""
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
        self._fd, direct = open_direct(path, flags, 0o644)
        return direct

    # ---------------------------------------------------------------- writer threads

    def _writer(self) -> None:
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                job = self._jobs.pop(0)
            if job is None:
                return
            buf, offset, n = job
            try:
                if self._error is None:
                    self._pwrite(buf, offset, n)
            except OSError as exc:
                with self._lock:
                    self._error = self._error or OSError(exc.errno, exc.strerror, self.path)
            finally:
                with self._ready:
                    self._free.append(buf)
                    self._ready.notify_all()

    def _pwrite(self, buf: mmap.mmap, offset: int, n: int) -> None:
        with memoryview(buf) as view:
            done = 0
            while done < n:
                try:
                    done += os.pwrite(self._fd, view[done:n], offset + done)
                except OSError as exc:
                    if exc.errno != errno.EINVAL or not self.direct:
                        raise
                    self._buffered()  # and write the same bytes again

    def _buffered(self) -> None:
        """The filesystem opened the file for O_DIRECT but refuses the writes: write through
        the page cache from here on (the same fd; Linux lets F_SETFL clear O_DIRECT)."""
        with self._lock:
            if self.direct:
                fl = fcntl.fcntl(self._fd, fcntl.F_GETFL)
                fcntl.fcntl(self._fd, fcntl.F_SETFL, fl & ~os.O_DIRECT)
                self.direct = False

    def _ship(self, n: int) -> None:
        """Hand the block being filled (its first `n` bytes) to a writer; take a free one."""
        with self._ready:
            self._jobs.append((self._cur, self._pos - self._fill, n))
            self._ready.notify_all()
            while not self._free:
                self._ready.wait()
            self._cur = self._free.pop()
        self._view.release()
        self._view = memoryview(self._cur)
        self._fill = 0

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    # ---------------------------------------------------------------- file interface

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def fileno(self) -> int:
        return self._fd

    def write(self, b) -> int:
        self._raise()
        with memoryview(b) as mv, mv.cast("B") as src:
            n, i = len(src), 0
            while i < n:
                k = min(n - i, self._size - self._fill)
                self._view[self._fill : self._fill + k] = src[i : i + k]
                self._fill += k
                self._pos += k
                i += k
                if self._fill == self._size:
                    self._ship(self._size)
                    self._raise()  # a failed write stops a long one early
        return n

    def close(self) -> None:
        """Write what is left, cut the file to the bytes written, fsync; then close. The file
        is on disk when this returns without raising."""
        if self.closed or self._fd < 0:
            super().close()
            return
        try:
            if self._fill and self._error is None:
                pad = -self._fill % ALIGN  # O_DIRECT writes whole aligned blocks
                self._view[self._fill : self._fill + pad] = bytes(pad)
                self._ship(self._fill + pad)
            self._stop()
            self._raise()
            os.ftruncate(self._fd, self._pos)
            os.fsync(self._fd)
        finally:
            self.abort()

    def abort(self) -> None:
        """Stop the writers and close the file without finishing it (after an error)."""
        if self.closed or self._fd < 0:
            super().close()
            return
        self._stop()
        self._view.release()
        os.close(self._fd)
        self._blocks.give(self._all)
        if self._own:
            self._blocks.close()
        super().close()

    def _stop(self) -> None:
        with self._ready:
            self._jobs.extend([None] * len(self._threads))
            self._ready.notify_all()
        for t in self._threads:
            t.join()
        self._threads = []


@dataclass(frozen=True)
class Ceiling:
    gbps: float | None
    method: str  # how it was measured
    error: str | None = None  # why nothing could be measured


def _fio(directory: str, total_bytes: int, jobs: int, timeout_s: float) -> Ceiling:
    per_job = max(1 << 20, total_bytes // jobs)
    name = f".rackform-ceiling-{os.getpid()}"
    cmd = [
        "fio",
        f"--name={name}",
        f"--directory={directory}",
        "--rw=write",
        "--bs=1M",
        f"--size={per_job}",
        f"--numjobs={jobs}",
        "--group_reporting",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--end_fsync=1",
        "--unlink=1",
        "--output-format=json",
    ]
    method = f"fio, {jobs} jobs x {per_job >> 20} MiB, O_DIRECT, libaio"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Ceiling(None, method, f"fio did not finish in {timeout_s:g} s")
    finally:
        for f in os.listdir(directory) if os.path.isdir(directory) else []:
            if f.startswith(name):
                _remove(os.path.join(directory, f))
    if p.returncode != 0:
        last = (p.stderr.strip() or p.stdout.strip() or "no output").splitlines()[-1]
        return Ceiling(None, method, f"fio exited {p.returncode}: {last}")
    try:
        doc = json.loads(p.stdout[p.stdout.index("{") :])
        bw = sum(j["write"]["bw_bytes"] for j in doc["jobs"])
    except (ValueError, KeyError, TypeError) as exc:
        return Ceiling(None, method, f"fio output not understood: {exc}")
    return Ceiling(bw / 1e9, method)


def open_direct(path: str, flags: int, mode: int) -> tuple[int, bool]:
    """`os.open` with O_DIRECT where the filesystem takes it, else without: (fd, whether
    O_DIRECT took). A filesystem that refuses O_DIRECT (tmpfs: EINVAL) may have created the
    file first, so an exclusive create removes it before trying again."""
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct, mode), True
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            if flags & os.O_EXCL:
                _remove(path)
    return os.open(path, flags, mode), False


def fsync_dir(path: str) -> None:
    """A directory's entries (files created or renamed into it) on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    """Remove a probe file if it is there. Never raises: on a read-only filesystem unlink
    fails (EROFS) even for a file that was never made, and a cleanup must not turn the
    write's own failure into a crash of the checks."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def _python(directory: str, total_bytes: int, block: int = 8 << 20) -> Ceiling:
    path = os.path.join(directory, f".rackform-ceiling-{os.getpid()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    method = f"python, 1 writer, {block >> 20} MiB blocks, O_DIRECT"
    try:
        fd, direct = open_direct(path, flags, 0o600)
        if not direct:
            method = (
                f"python, 1 writer, {block >> 20} MiB blocks, buffered + fsync (no O_DIRECT here)"
            )
        # An anonymous mapping is page-aligned, as O_DIRECT requires of the buffer.
        buf = mmap.mmap(-1, block)
        buf.write(os.urandom(1 << 20) * (block >> 20))
        try:
            written, t0 = 0, time.perf_counter()
            while written < total_bytes:
                n = os.write(fd, buf)
                if n <= 0:
                    raise OSError(28, "short write")
                written += n
            os.fsync(fd)
            took = time.perf_counter() - t0
        finally:
            os.close(fd)
            buf.close()
    except OSError as exc:
        return Ceiling(
            None, method, f"write to {directory} failed: [Errno {exc.errno}] {exc.strerror}"
        )
    finally:
        _remove(path)
    return Ceiling(written / took / 1e9, method)


def measure(
    directory: str, total_mb: int, jobs: int = 4, timeout_s: float = 300.0, use_fio: bool = True
) -> Ceiling:
    """Write `total_mb` MiB sequentially to probe files under `directory`: in a directory of
    their own made there for the run (tempfile.mkdtemp: a new name, 0700), removed after. The
    checkpoint mount may be writable by every user (1777, as the DLAMI's is), and the probe runs
    as root: fio's files in the mount itself would be opened through any link a user placed
    at their names."""
    if not os.path.isdir(directory):
        return Ceiling(None, "none", f"{directory} does not exist or is not a directory")
    total = total_mb << 20
    fio = use_fio and shutil.which("fio")
    try:
        own = tempfile.mkdtemp(prefix=".rackform-ceiling-", dir=directory)
    except OSError as exc:
        method = "fio" if fio else "python"
        return Ceiling(
            None, method, f"write to {directory} failed: [Errno {exc.errno}] {exc.strerror}"
        )
    try:
        if fio:
            return _fio(own, total, jobs, timeout_s)
        return _python(own, total)
    finally:
        shutil.rmtree(own, ignore_errors=True)
