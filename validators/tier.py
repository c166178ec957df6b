"""Checkpoints tiered to a second store: object storage (S3, or any store that speaks its API),
or a directory on the cluster's shared file system (NFS, Lustre). The job writes each checkpoint
to the node's array as before, and a background thread copies it to `step-NNNNNNNN/` under the
tier (`s3://BUCKET/PREFIX`, or an absolute directory: `/shared/ckpts/job-42` or
`file:///shared/ckpts/job-42`), so training never waits on the tier. A copy is complete only
once its manifest (`COMPLETE`: every file and its size) is written, last: a copy cut short is
never restored. The newest `keep` complete copies are kept, older ones deleted.

A node that lost its local copy (a replaced node, a wiped array) restores the newest complete
copy into its checkpoint directory before the job resumes. For S3 the endpoint and credentials
are boto3's own (`AWS_ENDPOINT_URL_S3` for a store other than AWS's), and boto3 is needed only
where a job asks for an S3 tier. A directory is written through validators/tier_dir.py, which
offers the same six calls of boto3's S3 client with S3's semantics (each file written under a
temporary name, fsync'd, renamed), so the logic here is one for both.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from validators.tier_dir import DirStore, TierError

MANIFEST = "COMPLETE"
_URL = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$")
_STEP = re.compile(r"step-(\d{8})/" + MANIFEST + "$")
FORMS = "s3://BUCKET/PREFIX, or a shared directory: /ABS/PATH or file:///ABS/PATH"


def directory(url: str) -> str | None:
    """The tier's directory where `url` names one (an absolute path, or file:///ABS/PATH),
    normalized; None for any other URL. A relative path or one with `..` is refused."""
    url = url or ""
    if url.startswith("file://"):
        path = url[len("file://") :]
        if not path.startswith("/"):
            raise TierError(
                f"{url!r} is not an object-tier URL: a file URL names an absolute path on this"
                f" node (file:///ABS/PATH, three slashes); write {FORMS}"
            )
    elif "://" in url or not url:
        return None
    else:
        path = url
        if not path.startswith("/"):
            raise TierError(
                f"{url!r} is not an object-tier URL: a directory must be an absolute path (every"
                f" node must find the same one); write {FORMS}"
            )
    if ".." in path.split("/"):
        raise TierError(f"{url!r} is not an object-tier URL: no '..' in the path; write {FORMS}")
    path = os.path.normpath(path)
    if path == "/":
        raise TierError(f"{url!r} is not an object-tier URL: not / itself; write {FORMS}")
    return path


def parse(url: str) -> tuple[str, str]:
    """(bucket, prefix) of an s3:// URL; (the directory, "") of a directory tier."""
    path = directory(url)
    if path is not None:
        return path, ""
    m = _URL.match(url or "")
    if not m:
        raise TierError(f"{url!r} is not an object-tier URL: write {FORMS}")
    return m.group(1), (m.group(2) or "").strip("/")


def join(url: str, name: str) -> str:
    """The tier `name` under `url` (each node's own copy: the smoke job's `<url>/<host>`)."""
    parse(url)
    return f"{url.rstrip('/')}/{name}"


def client():
    try:
        import boto3  # optional: only a job with --object-tier needs it
    except ImportError:
        raise TierError("the object tier needs boto3 in the job's Python environment") from None
    return boto3.client("s3")


@dataclass
class Copy:
    step: int
    bytes: int
    seconds: float
    lag_s: float  # from the checkpoint's publishing on the node to its copy being complete

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "step": self.step,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "gbps": round(self.gbps, 4),
            "lag_s": round(self.lag_s, 3),
        }


@dataclass
class ObjectTier:
    url: str
    keep: int = 2
    s3: Any = None
    copies: list[Copy] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Steps not copied because a newer checkpoint came first: the node's directory keeps only
    # the newest, so an older one still queued (or being read) may be gone, and is not needed.
    superseded: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bucket, self.prefix = parse(self.url)
        if self.s3 is None:
            if directory(self.url) is not None:
                self.s3 = DirStore()
            else:
                self.s3 = client()
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._newest = 0  # the newest step asked for
        self._asked = 0  # how many copies were asked for

    def key(self, step: int, rel: str = "") -> str:
        return "/".join(p for p in (self.prefix, f"step-{step:08d}", rel) if p)

    # ------------------------------------------------------------------ copying up

    def put(self, step: int, path: str) -> None:
        """Copy the published checkpoint `path` in the background (in order, one at a time)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="object-tier", daemon=True)
            self._thread.start()
        self._newest = max(self._newest, step)
        self._asked += 1
        self._queue.put((step, path, time.time()))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            step = item[0]
            try:
                if step < self._newest:
                    self._supersede(step)
                else:
                    self._copy(*item)
            except FileNotFoundError:
                if step < self._newest:  # pruned on the node while being read: a newer one is due
                    self._supersede(step)
                else:
                    self.errors.append(f"step {step}: its files went away while being copied")
            except Exception as exc:  # recorded and reported, never raised into training
                self.errors.append(f"step {step}: {type(exc).__name__}: {exc}")
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _supersede(self, step: int) -> None:
        """Leave `step` for the newer checkpoint, removing what of it went up (it has no
        manifest, so it was never restorable)."""
        self._delete(step)
        self.superseded.append(step)

    def _delete(self, step: int) -> None:
        # The manifest first: a copy being deleted is never taken for a complete one.
        self.s3.delete_object(Bucket=self.bucket, Key=self.key(step, MANIFEST))
        for key in self._keys(self.key(step) + "/"):
            self.s3.delete_object(Bucket=self.bucket, Key=key)

    def _copy(self, step: int, path: str, published: float) -> None:
        start, files = time.time(), []
        # A copy of this step already there (an earlier run's) is incomplete from here on.
        self.s3.delete_object(Bucket=self.bucket, Key=self.key(step, MANIFEST))
        for root, _dirs, names in os.walk(path):
            for name in sorted(names):
                local = os.path.join(root, name)
                rel = os.path.relpath(local, path)
                self.s3.upload_file(local, self.bucket, self.key(step, rel))
                files.append({"path": rel, "size": os.path.getsize(local)})
        total = sum(f["size"] for f in files)
        body = json.dumps({"step": step, "files": files, "bytes": total}).encode()
        self.s3.put_object(Bucket=self.bucket, Key=self.key(step, MANIFEST), Body=body)
        done = time.time()
        self.copies.append(Copy(step, total, done - start, done - published))
        self._prune()

    def _prune(self) -> None:
        for old in self.steps()[: -max(1, self.keep)]:
            self._delete(old)

    def close(self, timeout_s: float, tick=None, tick_s: float = 1.0) -> dict:
        """Wait up to `timeout_s` for the copies asked for, then say what happened. `tick`,
        when given, is called every `tick_s` while waiting (a heartbeat, or a collective that
        keeps the node's other ranks waiting with this one)."""
        deadline = time.time() + timeout_s
        if self._thread is not None:
            self._queue.put(None)
            while self._thread.is_alive() and (left := deadline - time.time()) > 0:
                self._thread.join(min(left, tick_s) if tick else left)
                if tick and self._thread.is_alive():
                    tick()
        pending = self._queue.qsize() if self._thread is not None and self._thread.is_alive() else 0
        return {
            "url": self.url,
            "copies": [c.as_dict() for c in self.copies],
            "errors": list(self.errors),
            "superseded": list(self.superseded),
            "newest": self._newest,
            "asked": self._asked,
            "unfinished": bool(self._thread is not None and self._thread.is_alive()),
            "pending": pending,
        }

    # ------------------------------------------------------------------ reading back

    def _keys(self, prefix: str) -> list[str]:
        out, token = [], None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kw["ContinuationToken"] = token
            page = self.s3.list_objects_v2(**kw)
            out += [o["Key"] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def steps(self) -> list[int]:
        """The complete copies, oldest first."""
        base = f"{self.prefix}/" if self.prefix else ""
        found = (_STEP.search(k[len(base) :]) for k in self._keys(base))
        return sorted(int(m.group(1)) for m in found if m)

    def restore(self, step: int, staging: str, final: str) -> int:
        """Download the complete copy of `step` into `staging`, each file's size checked
        against the manifest, then rename it to `final`. Returns the bytes read."""
        obj = self.s3.get_object(Bucket=self.bucket, Key=self.key(step, MANIFEST))
        manifest = json.loads(obj["Body"].read())
        shutil.rmtree(staging, ignore_errors=True)
        for f in manifest["files"]:
            local = os.path.join(staging, f["path"])
            os.makedirs(os.path.dirname(local), exist_ok=True)
            self.s3.download_file(self.bucket, self.key(step, f["path"]), local)
            if os.path.getsize(local) != f["size"]:
                raise TierError(
                    f"{self.key(step, f['path'])}: {os.path.getsize(local)} bytes, the manifest"
                    f" says {f['size']}"
                )
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        return int(manifest["bytes"])
