"""Directories and files in places other users can write (a shared tier's `.rackform`, a
checkpoint mount that is 1777, /tmp), made and opened so that nothing placed there first can
send a write elsewhere or stand in for what a check measures:

- a directory is opened with O_NOFOLLOW | O_DIRECTORY (a link planted in its place is refused,
  never followed), and what happens inside it happens relative to that open directory (dir_fd),
  so renaming or replacing its path afterwards changes nothing;
- a node's own directory must be its own: not group- or world-writable, and owned by the user
  this node's files are created as on that file system (root, or under NFS's root_squash
  nobody), else it is refused;
- a file is created new, O_CREAT | O_EXCL | O_NOFOLLOW, under a name no one can guess, then
  renamed into place (the rename replaces whatever was at the name, a link included, without
  following it).

A refusal is `Unsafe`, an OSError whose message names the path and why; the checks report it
as a failure, never a figure. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile

DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Unsafe(OSError):
    """A path someone else could have placed or can still change: refused, with the reason."""


def _what(name: str, dir_fd: int | None) -> str:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return "not a directory"
    return "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"


def open_dir(
    name: str, dir_fd: int | None = None, *, shown: str = "", make: bool = False, mode: int = 0o755
) -> tuple[int, bool]:
    """(fd, whether made now) of the directory `name` (relative to `dir_fd` where given),
    never through a link at `name`; with `make`, made where missing (looked up first: an NFS
    server answers mkdir in a directory the node may not write to, under root_squash, with
    EACCES even where the entry exists)."""
    shown = shown or name
    made = False
    for _attempt in (1, 2):
        try:
            return os.open(name, DIR, dir_fd=dir_fd), made
        except FileNotFoundError:
            if not make or made:
                raise
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise Unsafe(
                    exc.errno, f"{shown} is {_what(name, dir_fd)}: refusing to use it"
                ) from None
            raise
        try:
            os.mkdir(name, mode, dir_fd=dir_fd)
            made = True
        except FileExistsError:
            made = True  # by another node meanwhile: open it as found
    raise FileNotFoundError(errno.ENOENT, f"{shown} vanished while being made")


def shared_dir(name: str, dir_fd: int | None = None, *, shown: str = "") -> int:
    """A directory every node writes into (sticky, 1777, whatever the umask), opened as
    `open_dir` opens one; made where missing."""
    fd, made = open_dir(name, dir_fd, shown=shown, make=True, mode=0o1777)
    if made:
        with contextlib.suppress(PermissionError):  # made by another node meanwhile
            os.fchmod(fd, 0o1777)
    return fd


def own_dir(name: str, dir_fd: int, *, shown: str = "") -> int:
    """This node's own directory `name` under `dir_fd`, made where missing, opened, and refused
    (`Unsafe`) where anyone else could have made it or can write into it."""
    shown = shown or name
    fd, _made = open_dir(name, dir_fd, shown=shown, make=True)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o022:
            raise Unsafe(
                errno.EPERM,
                f"{shown} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): refusing"
                " to use it",
            )
        try:
            mine = identity(fd) if st.st_uid != os.geteuid() else st.st_uid
        except PermissionError:  # not even this node may write there: someone else's
            mine = -1
        if st.st_uid != mine:
            raise Unsafe(
                errno.EPERM,
                f"{shown} is owned by uid {st.st_uid}, not by the user this node writes as"
                " there: refusing to use it",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def identity(dir_fd: int) -> int:
    """The uid a file this process creates under `dir_fd` gets (root's own, or nobody on an
    NFS export that squashes root): a file made and removed again to learn it."""
    name = f".owner-{secrets.token_hex(8)}"
    fd = os.open(name, NEW, 0o600, dir_fd=dir_fd)
    try:
        return os.fstat(fd).st_uid
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)


def create(prefix: str, dir_fd: int, mode: int = 0o600) -> tuple[int, str]:
    """(fd open for reading and writing, its name) of a new file under `dir_fd`, named
    `prefix` and a random part: never an existing file, never through a link."""
    name = f"{prefix}{secrets.token_hex(8)}"
    return os.open(name, NEW, mode, dir_fd=dir_fd), name


def open_file(name: str, dir_fd: int, owner: int | None = None, *, shown: str = "") -> int:
    """A regular file `name` under `dir_fd` opened for reading, never through a link, and
    (with `owner`) only if that uid owns it; FileNotFoundError where it is not there."""
    shown = shown or name
    try:
        # O_NONBLOCK: a FIFO planted at the name must not hang the open (no effect on a file).
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Unsafe(exc.errno, f"{shown} is a symbolic link: refusing to read it") from None
        raise
    st = os.fstat(fd)
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif owner is not None and st.st_uid != owner:
        why = f"is owned by uid {st.st_uid}, not {owner}"
    if why:
        os.close(fd)
        raise Unsafe(errno.EPERM, f"{shown} {why}: refusing to read it")
    return fd


def write_whole(path: str, data: str | bytes, mode: int = 0o644) -> None:
    """Write `path` whole: a new file beside it (tempfile.mkstemp: O_EXCL, a name no one can
    guess, never through a link), renamed over `path` (a link at `path` is replaced, not
    followed). A report read while it is written is the old one or the new one, never half."""
    directory, base = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{base}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
