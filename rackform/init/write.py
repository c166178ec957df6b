"""Writing a new repository's files without overwriting anything, all or nothing.

Everything is checked before the first write: the directory (created when missing, with its
parents) and every file that would be written. A file that exists stops the whole run with the
list of those that do. A write that fails anyway (permissions, a full disk, a file created in
the meantime: each file is opened with O_EXCL, so even then nothing is overwritten) removes every
file and directory this run created before the error is raised."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path


class Exists(Exception):
    """Files (or a path where a directory is needed) that are already there."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        super().__init__(", ".join(map(str, paths)))


class CannotWrite(Exception):
    """The directory or a file in it cannot be written (one line)."""


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor)


def existing(root: Path, rels: list[str]) -> list[Path]:
    """Of the files to write under `root`, those already there, and any directory on their way
    that exists as something other than a directory."""
    out: list[Path] = []
    for rel in rels:
        path = root / rel
        blocked = [d for d in reversed(path.parents) if d.is_relative_to(root) and _not_dir(d)]
        if blocked:
            out += [d for d in blocked if d not in out]
        elif path.exists() or path.is_symlink():
            out.append(path)
    return out


def _not_dir(path: Path) -> bool:
    return (path.exists() or path.is_symlink()) and not path.is_dir()


def check(root: Path, rels: list[str]) -> None:
    """Raise CannotWrite when `root` cannot be a directory, Exists when a file is there."""
    base = _nearest_existing(root)
    if not base.is_dir():
        raise CannotWrite(f"{base}: not a directory")
    found = existing(root, rels)
    if found:
        raise Exists(found)


def write_new(root: Path, files: Mapping[str, str]) -> list[Path]:
    """Write every file under `root` (created when missing), or nothing: see the module."""
    try:
        check(root, list(files))
    except OSError as exc:  # e.g. a directory on the way that may not be searched
        raise CannotWrite(f"{exc.filename or root}: cannot read ({exc.strerror})") from None
    made_dirs: list[Path] = []
    written: list[Path] = []
    try:
        for rel, content in files.items():
            path = root / rel
            for d in reversed((path.parent, *path.parent.parents)):
                if not d.exists():
                    d.mkdir()
                    made_dirs.append(d)
            with open(path, "x", encoding="utf-8", newline="\n") as f:
                written.append(path)
                f.write(content)
    except BaseException as exc:
        for path in reversed(written):
            with contextlib.suppress(OSError):
                path.unlink()
        for d in reversed(made_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
        if isinstance(exc, FileExistsError):
            raise Exists([Path(exc.filename)]) from None
        if isinstance(exc, OSError):
            where = exc.filename or root
            raise CannotWrite(f"{where}: cannot write ({exc.strerror or exc})") from None
        raise
    return written
