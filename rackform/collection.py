"""The Ansible collection `rackform.gpu`, put together from the repository's one copy of each file:
the collection's own files under `collection/` (galaxy.yml, meta/, playbooks/, plugins/, its
README), the roles under `roles/`, and the validators under `validators/`, which ship in the
smoke_train role's files.

The wheel's build (setup.py) writes the collection into the package; a checkout gets it in
`build/ansible_collections/`, made again whenever a source file changed (rackform.paths decides
which). Only the standard library: setup.py imports this file before any dependency exists.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Source directory in the repository -> where it goes in the collection.
LAYOUT = (
    ("collection", ""),
    ("roles", "roles"),
    ("validators", "roles/smoke_train/files/validators"),
)
NAMESPACE, NAME = "rackform", "gpu"
# Never part of the collection: byte-compiled caches, and what ansible-test writes.
SKIPPED_DIRS = {"__pycache__", "output"}


def _skipped(rel: Path) -> bool:
    return rel.suffix == ".pyc" or any(part in SKIPPED_DIRS for part in rel.parts[:-1])


def is_source(root: Path) -> bool:
    """`root` is a checkout holding the collection's sources."""
    return (root / "collection" / "galaxy.yml").is_file() and (root / "roles").is_dir()


def files(root: Path) -> Iterator[tuple[Path, str]]:
    """Every source file under `root` with its path inside the collection, in a stable order."""
    for source, dest in LAYOUT:
        base = root / source
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            rel = path.relative_to(base)
            if not _skipped(rel):
                yield path, (Path(dest) / rel).as_posix()


def _stamp(root: Path) -> str:
    """What the sources are now (paths, sizes, modification times): a changed file, a new one
    or a removed one gives another stamp."""
    h = hashlib.sha256()
    for path, rel in files(root):
        st = path.stat()
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def write(root: Path, dest: Path) -> None:
    """Copy the collection from the sources under `root` into `dest` (the collection's own
    directory, `.../ansible_collections/rackform/gpu`), which must not exist."""
    for path, rel in files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def built(root: Path, out: Path) -> Path:
    """The collection made from `root`'s sources under `out` (which then holds
    ansible_collections/): made again only when a source changed, one process at a time, and
    swapped in whole (a caller sees the old copy or the new one, never a half-written one; a run
    still reading the old copy when a source changes under it may fail). Returns the
    collection's directory."""
    final = out / "ansible_collections" / NAMESPACE / NAME
    stamp_file = out / f".{NAMESPACE}.{NAME}.stamp"
    stamp = _stamp(root)
    if final.is_dir() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir() and stamp_file.is_file() and stamp_file.read_text() == stamp:
            return final
        fresh = Path(tempfile.mkdtemp(prefix=f".{NAME}-", dir=final.parent))
        write(root, fresh / NAME)
        old = final.parent / f".{NAME}-old-{os.getpid()}"
        if final.exists():
            final.rename(old)
        (fresh / NAME).rename(final)
        stamp_file.write_text(stamp)
        shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(fresh, ignore_errors=True)
    return final
