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
than fill the node's own disk."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import uuid

from validators.storage import fsync_dir


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
    def path(bucket: str, key: str) -> str:
        """The file of `key` under the directory `bucket`; a key that would leave it (`..`, an
        absolute path) is refused."""
        parts = key.split("/")
        if key.startswith("/") or ".." in parts or not key:
            raise TierError(f"key {key!r}: a key is a relative path inside the tier, without '..'")
        return os.path.join(bucket, *parts)

    @staticmethod
    def _root(bucket: str, make: bool) -> bool:
        """Whether the tier's directory is there; with `make`, made where its parent is (never
        its parents: see the module's docstring)."""
        if os.path.isdir(bucket):
            return True
        if os.path.exists(bucket):
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

    def _write(self, bucket: str, key: str, fill) -> None:
        """Write `key` by `fill(file)`: to a temporary name in its directory, fsync'd, renamed."""
        dest = self.path(bucket, key)
        self._root(bucket, make=True)
        folder = os.path.dirname(dest)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f"{_TMP}{os.path.basename(dest)}.{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "wb") as fh:
                fill(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, dest)
        except BaseException:
            _unlink(tmp)
            raise
        fsync_dir(folder)

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
        dest = self.path(Bucket, Key)
        if not self._root(Bucket, make=False):
            return
        try:
            os.unlink(dest)
        except FileNotFoundError:
            return
        folder, root = os.path.dirname(dest), os.path.normpath(Bucket)
        while os.path.normpath(folder) != root:
            try:
                os.rmdir(folder)
            except OSError:  # not empty (or made again meanwhile): it stays
                return
            folder = os.path.dirname(folder)

    def list_objects_v2(
        self, *, Bucket: str, Prefix: str = "", ContinuationToken: str | None = None
    ) -> dict:
        """Every key under `Prefix`, sorted, on one page (files being written left out)."""
        if not self._root(Bucket, make=False):
            return {"Contents": [], "IsTruncated": False, "KeyCount": 0}
        base = Prefix.rsplit("/", 1)[0] if "/" in Prefix else ""
        top = self.path(Bucket, base) if base else Bucket
        keys = []
        for folder, _dirs, names in os.walk(top, onerror=_unless_gone):
            rel = os.path.relpath(folder, Bucket)
            for name in names:
                if name.startswith(_TMP):
                    continue
                key = name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"
                if key.startswith(Prefix):
                    keys.append(key)
        keys.sort()
        return {"Contents": [{"Key": k} for k in keys], "IsTruncated": False, "KeyCount": len(keys)}

    def get_object(self, *, Bucket: str, Key: str) -> dict:
        return {"Body": io.BytesIO(self._read(Bucket, Key))}

    def download_file(self, Bucket: str, Key: str, Filename: str) -> None:
        src = self.path(Bucket, Key)
        try:
            shutil.copyfile(src, Filename)
        except FileNotFoundError:
            if os.path.exists(src):
                raise  # the local side's
            raise NoSuchKey(f"no such key {Key!r} in {Bucket}") from None

    def _read(self, bucket: str, key: str) -> bytes:
        try:
            with open(self.path(bucket, key), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            raise NoSuchKey(f"no such key {key!r} in {bucket}") from None


def _unless_gone(exc: OSError) -> None:
    """A listing's error is raised (an unreadable directory is the store refusing, as S3's
    AccessDenied), unless the directory is not there (no such prefix, or pruned meanwhile)."""
    if not isinstance(exc, FileNotFoundError):
        raise exc


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
