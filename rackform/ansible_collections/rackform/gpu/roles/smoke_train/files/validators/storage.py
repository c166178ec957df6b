"""The storage ceiling: how fast the checkpoint mount takes a sequential direct-IO write, so the
checkpoint's GB/s can be read as a fraction of what the disk can do. fio when it is installed
(several jobs, libaio, 1 MiB blocks); otherwise one Python writer with O_DIRECT. Standard
library only. The probe file is removed afterwards, whatever happens."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import shutil
import subprocess
import time
from dataclasses import dataclass


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


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _python(directory: str, total_bytes: int, block: int = 8 << 20) -> Ceiling:
    path = os.path.join(directory, f".rackform-ceiling-{os.getpid()}")
    direct = getattr(os, "O_DIRECT", 0)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    method = f"python, 1 writer, {block >> 20} MiB blocks, O_DIRECT"
    try:
        try:
            fd = os.open(path, flags | direct, 0o600)
        except OSError as exc:
            if exc.errno != 22 or not direct:  # EINVAL: the filesystem refuses O_DIRECT
                raise
            fd = os.open(path, flags, 0o600)
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
    """Write `total_mb` MiB sequentially to a probe file under `directory`."""
    if not os.path.isdir(directory):
        return Ceiling(None, "none", f"{directory} does not exist or is not a directory")
    total = total_mb << 20
    if use_fio and shutil.which("fio"):
        return _fio(directory, total, jobs, timeout_s)
    return _python(directory, total)
