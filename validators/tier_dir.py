"""A directory on the cluster's shared file system (NFS, Lustre) as the checkpoint tier's store:
the six calls of boto3's S3 client the tier makes (validators/tier.py), with S3's semantics, over
a directory tree. The "bucket" is the tier's directory (absolute), a key a path relative to it.

Every file is written to a hidden temporary name in its destination directory, fsync'd, then
renamed into place (the directory fsync'd too), so a reader on another node never sees half a
file, and the tier's manifest, written last, is there only once every file it names is. As on
S3: deleting a missing key is not an error, a listing is every key under a prefix (sorted; one
page), and reading a missing key raises (`NoSuchKey`, a FileNotFoundError).

The tier's directory is made if missing, but only in a directory that exists: where the shared
mount is not mounted, its empty mount point holds nothing, and the copies must fail rather
than fill the node's own disk.

Any user of the shared file system may place things in the tier's tree. Nothing placed there
sends a write elsewhere or stands in for a checkpoint: each directory from the tier's own down
is opened without following a link (validators/nofollow.py) and the work inside it is done
relative to the open directory; files are created new under names no one can guess and renamed
into place; a key is read only from a regular file reached without a link, and a listing names
regular files only. A link met on the way is refused (`Unsafe`, an OSError naming the path)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import stat
from collections.abc import Iterator

from validators.nofollow import create, open_dir, open_file


class TierError(RuntimeError):
    """The tier cannot be used (a bad URL, no boto3, the store refused). Defined here, below
    validators/tier.py, which uses this store and names the error for its callers."""


_TMP = ".tier-tmp-"  # the prefix of a file being written; never listed


class NoSuchKey(FileNotFoundError):
    """A key the tier's directory does not hold (S3's NoSuchKey)."""


class DirStore:
    """boto3's S3 client's upload_file, put_object, delete_object, list_objects_v2,
    get_object and download_file, over directories: Bucket is the directory."""

    # ------------------------------------------------------------------ paths

    @staticmethod
    def _parts(key: str) -> list[str]:
        parts = key.split("/")
        if key.startswith("/") or ".." in parts or not key or "" in parts:
            raise TierError(f"key {key!r}: a key is a relative path inside the tier, without '..'")
        return parts

    @classmethod
    def path(cls, bucket: str, key: str) -> str:
        """The file of `key` under the directory `bucket`; a key that would leave it (`..`, an
        absolute path) is refused."""
        return os.path.join(bucket, *cls._parts(key))

    @staticmethod
    def _root(bucket: str, make: bool) -> bool:
        """Whether the tier's directory is there; with `make`, made where its parent is (never
        its parents: see the module's docstring)."""
        if os.path.isdir(bucket) and not os.path.islink(bucket):
            return True
        if os.path.islink(bucket):
            raise TierError(f"{bucket} is a symbolic link: the tier's directory is used as itself")
        if os.path.lexists(bucket):
            raise TierError(f"{bucket} is not a directory")
        parent = os.path.dirname(bucket.rstrip("/")) or "/"
        if os.path.exists(parent) and not os.path.isdir(parent):
            raise TierError(f"{parent} is not a directory: it cannot hold the tier's {bucket}")
        if not os.path.isdir(parent):
            raise TierError(
                f"{parent} does not exist: the tier's directory {bucket} is made only in an"
                " existing directory (is the shared file system mounted?)"
            )
        if make:
            with contextlib.suppress(FileExistsError):  # another node made it meanwhile
                os.mkdir(bucket)
            return True
        return False

    @contextlib.contextmanager
    def _dirs(self, bucket: str, names: list[str], make: bool) -> Iterator[list[int]]:
        """The open directories from the tier's own down through `names` (each opened without
        following a link; made where missing with `make`): FileNotFoundError where one is not
        there. Closed afterwards."""
        fds = [open_dir(bucket)[0]]
        try:
            for i, name in enumerate(names):
                shown = os.path.join(bucket, *names[: i + 1])
                fds.append(open_dir(name, fds[-1], shown=shown, make=make)[0])
            yield fds
        finally:
            for fd in fds:
                os.close(fd)

    def _write(self, bucket: str, key: str, fill) -> None:
        """Write `key` by `fill(file)`: to a new file under a name no one can guess in its
        directory, fsync'd, renamed into place (the directory fsync'd too)."""
        parts = self._parts(key)
        self._root(bucket, make=True)
        with self._dirs(bucket, parts[:-1], make=True) as fds:
            folder = fds[-1]
            fd, tmp = create(f"{_TMP}{parts[-1]}.", folder, 0o644)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fill(fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=folder)
                raise
            os.fsync(folder)

    # ------------------------------------------------------------------ S3's calls

    def upload_file(self, Filename: str, Bucket: str, Key: str) -> None:
        # The node's file opened first: one gone meanwhile is the FileNotFoundError the tier
        # expects of a checkpoint pruned while being read; the store's own errors are others.
        with open(Filename, "rb") as src:
            try:
                self._write(Bucket, Key, lambda dst: shutil.copyfileobj(src, dst, 8 << 20))
            except FileNotFoundError as exc:
                raise TierError(f"cannot write {self.path(Bucket, Key)}: {exc}") from None

    def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> None:
        try:
            self._write(Bucket, Key, lambda dst: dst.write(Body))
        except FileNotFoundError as exc:
            raise TierError(f"cannot write {self.path(Bucket, Key)}: {exc}") from None

    def delete_object(self, *, Bucket: str, Key: str) -> None:
        """Remove `Key` (a missing one is not an error, as on S3), and the directories it
        leaves empty, up to the tier's."""
        parts = self._parts(Key)
        if not self._root(Bucket, make=False):
            return
        try:
            with self._dirs(Bucket, parts[:-1], make=False) as fds:
                os.unlink(parts[-1], dir_fd=fds[-1])
                for name, parent in zip(reversed(parts[:-1]), reversed(fds[:-1]), strict=True):
                    try:
                        os.rmdir(name, dir_fd=parent)
                    except OSError:  # not empty (or made again meanwhile): it stays
                        return
        except FileNotFoundError:
            return

    def list_objects_v2(
        self, *, Bucket: str, Prefix: str = "", ContinuationToken: str | None = None
    ) -> dict:
        """Every key under `Prefix`, sorted, on one page (files being written left out, and
        anything but a regular file)."""
        none = {"Contents": [], "IsTruncated": False, "KeyCount": 0}
        if not self._root(Bucket, make=False):
            return none
        base = Prefix.rsplit("/", 1)[0] if "/" in Prefix else ""
        keys = []
        try:
            with self._dirs(Bucket, self._parts(base) if base else [], make=False) as fds:
                walk = os.fwalk(".", dir_fd=fds[-1], onerror=_unless_gone)
                for folder, _dirs, names, folder_fd in walk:
                    rel = os.path.normpath(os.path.join(base, folder))
                    for name in names:
                        if name.startswith(_TMP) or not _regular(name, folder_fd):
                            continue
                        key = name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"
                        if key.startswith(Prefix):
                            keys.append(key)
        except FileNotFoundError:
            return none
        keys.sort()
        return {"Contents": [{"Key": k} for k in keys], "IsTruncated": False, "KeyCount": len(keys)}

    def get_object(self, *, Bucket: str, Key: str) -> dict:
        return {"Body": io.BytesIO(self._read(Bucket, Key))}

    def download_file(self, Bucket: str, Key: str, Filename: str) -> None:
        with self._open(Bucket, Key) as src, open(Filename, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)

    def _read(self, bucket: str, key: str) -> bytes:
        with self._open(bucket, key) as src:
            return src.read()

    @contextlib.contextmanager
    def _open(self, bucket: str, key: str):
        """`key`'s file, open for reading: a regular file reached without a link (NoSuchKey
        where there is none)."""
        parts = self._parts(key)
        try:
            with self._dirs(bucket, parts[:-1], make=False) as fds:
                fd = open_file(parts[-1], fds[-1], shown=self.path(bucket, key))
        except FileNotFoundError:
            raise NoSuchKey(f"no such key {key!r} in {bucket}") from None
        with os.fdopen(fd, "rb") as fh:
            yield fh


def _regular(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:  # pruned meanwhile
        return False


def _unless_gone(exc: OSError) -> None:
    """A listing's error is raised (an unreadable directory is the store refusing, as S3's
    AccessDenied), unless the directory is not there (no such prefix, or pruned meanwhile)."""
    if not isinstance(exc, FileNotFoundError) and exc.errno != errno.ENOENT:
        raise exc
