"""storage.DirectFile, the checkpoint's file writer: whatever the sizes of the writes, the file
holds exactly the bytes written (no padding left), O_DIRECT is used where the filesystem takes
it and the page cache where it refuses, and a failed write surfaces with its errno."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import random
import resource
import threading

import pytest

from validators import storage

SMALL = 2 * storage.ALIGN  # tiny blocks: every test crosses many block boundaries


def _takes_o_direct(directory) -> bool:
    """Whether the filesystem opens a file for O_DIRECT and writes an aligned block to it."""
    probe = os.path.join(directory, ".o-direct-probe")
    buf = mmap.mmap(-1, storage.ALIGN)  # page-aligned
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
        try:
            os.write(fd, buf)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError:
        return False
    finally:
        buf.close()
    return True


def _pieces(seed: int, total: int) -> list[bytes]:
    """Writes of every awkward size: empty, 1 byte, just under, at and over a block, many
    blocks at once."""
    rng = random.Random(seed)
    sizes = [0, 1, SMALL - 1, 1, SMALL, SMALL + 1, 5 * SMALL + 3, 4095, 4097]
    out, n = [], 0
    while n < total:
        k = sizes[len(out)] if len(out) < len(sizes) else rng.randrange(1, 3 * SMALL)
        out.append(rng.randbytes(k))
        n += k
    return out


@pytest.mark.parametrize("depth", [1, 3])
def test_the_file_holds_exactly_the_bytes_written(tmp_path, depth):
    pieces = _pieces(depth, 40 * SMALL + 123)  # ends mid-block: the tail is padded, then cut
    path = tmp_path / "f"
    f = storage.DirectFile(str(path), storage.Blocks(SMALL), depth)
    pos = 0
    for p in pieces:
        assert f.write(p) == len(p)
        pos += len(p)
        assert f.tell() == pos
    f.close()
    assert path.read_bytes() == b"".join(pieces)
    assert f.closed


def test_writes_of_any_buffer_shape(tmp_path):
    # torch hands memoryviews over its own memory; a 2-D or typed view is written as its bytes.
    import array

    ints = array.array("i", range(3000))
    block = memoryview(bytes(range(256)) * 40).cast("B", (40, 256))
    path = tmp_path / "f"
    f = storage.DirectFile(str(path), storage.Blocks(SMALL))
    f.write(ints)
    f.write(block)
    f.write(bytearray(b"end"))
    f.close()
    assert path.read_bytes() == ints.tobytes() + block.tobytes() + b"end"


def test_an_empty_file_is_empty(tmp_path):
    path = tmp_path / "f"
    storage.DirectFile(str(path), storage.Blocks(SMALL)).close()
    assert path.read_bytes() == b""


def test_o_direct_is_used_where_the_filesystem_takes_it(tmp_path):
    f = storage.DirectFile(str(tmp_path / "f"), storage.Blocks(SMALL))
    try:
        flags = fcntl.fcntl(f.fileno(), fcntl.F_GETFL)
        f.write(b"x" * (3 * SMALL))
        f.close()
    finally:
        f.abort()
    direct = _takes_o_direct(tmp_path)
    assert f.direct is direct
    assert bool(flags & os.O_DIRECT) is direct
    assert (tmp_path / "f").read_bytes() == b"x" * (3 * SMALL)


def test_a_filesystem_refusing_o_direct_at_open_gets_buffered_writes(tmp_path, monkeypatch):
    real_open = os.open

    def refusing(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(storage.os, "open", refusing)
    data = random.Random(1).randbytes(5 * SMALL + 7)
    f = storage.DirectFile(str(tmp_path / "f"), storage.Blocks(SMALL))
    f.write(data)
    f.close()
    assert f.direct is False
    assert (tmp_path / "f").read_bytes() == data


def test_a_filesystem_refusing_o_direct_writes_gets_buffered_writes(tmp_path, monkeypatch):
    if not _takes_o_direct(tmp_path):
        pytest.skip("this filesystem refuses O_DIRECT at open already")
    real_pwrite = os.pwrite
    refused = []

    def refusing(fd, data, offset):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(storage.os, "pwrite", refusing)
    data = random.Random(2).randbytes(7 * SMALL + 5)
    f = storage.DirectFile(str(tmp_path / "f"), storage.Blocks(SMALL), depth=2)
    f.write(data)
    f.close()
    assert refused, "the O_DIRECT write was never tried"
    assert f.direct is False
    assert (tmp_path / "f").read_bytes() == data


def test_a_refused_write_raises_with_its_errno_and_stops_the_writers(tmp_path):
    before = threading.active_count()
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (SMALL, old[1]))
    try:
        f = storage.DirectFile(str(tmp_path / "f"), storage.Blocks(SMALL), depth=2)
        with pytest.raises(OSError) as caught:
            for _ in range(100):
                f.write(b"y" * SMALL)
            f.close()
        f.abort()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
    assert caught.value.errno == errno.EFBIG
    assert caught.value.filename == str(tmp_path / "f")
    assert f.closed
    assert threading.active_count() == before


def test_blocks_are_aligned_and_reused(tmp_path):
    with pytest.raises(ValueError, match="multiple of 4096"):
        storage.Blocks(storage.ALIGN + 512)
    blocks = storage.Blocks(SMALL, 3)
    first = storage.DirectFile(str(tmp_path / "a"), blocks, depth=2)
    lent = list(first._all)
    first.close()
    second = storage.DirectFile(str(tmp_path / "b"), blocks, depth=2)
    assert {id(b) for b in second._all} == {id(b) for b in lent}  # no new memory
    second.close()
    blocks.close()
