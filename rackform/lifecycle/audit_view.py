"""What the decisions need from an audit log, kept beside it and brought up to date by reading
only the entries appended since: a run's cost does not grow with the log's length.

A view is a fold over the log's entries (a state, and a step that takes one entry into it),
cached as `<log>.<name>.json` with the byte offset it covers. A reader loads the cache, folds
the whole lines past that offset (a line still being written, without its newline, waits for
the next reader) and writes the cache back. The log stays the record: the cache is rebuilt
from the start whenever it cannot be trusted: missing, unreadable or hand-edited, of another
version, for another file (rotated: another inode), or for bytes the log no longer holds (cut
short, or edited before the offset: the last bytes the cache covered are compared). Two runs
folding at once each write a state whole for the offset they reached (a rename): either is
true, and the next reader goes on from it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = 1
TAIL = 256  # the bytes before the cached offset whose digest must still match


@dataclass(frozen=True)
class Fold:
    name: str  # the cache's name beside the log; change it when the state's shape changes
    init: Callable[[], Any]  # a fresh state (JSON: dicts, lists, numbers, strings)
    step: Callable[[Any, dict], None]  # takes one entry into the state, in place


def scan(path: Path, offset: int) -> Iterator[tuple[int, dict | None]]:
    """From `offset`, each whole line: the offset after it, and its entry (None where the line
    is not a JSON object: one a kill cut, later ended by the next append's newline)."""
    with path.open("rb") as f:
        f.seek(offset)
        for raw in f:
            if not raw.endswith(b"\n"):
                return  # still being written
            offset += len(raw)
            try:
                entry = json.loads(raw)
            except ValueError:
                entry = None
            yield offset, entry if isinstance(entry, dict) else None


def _tail_digest(path: Path, offset: int) -> str:
    with path.open("rb") as f:
        f.seek(max(0, offset - TAIL))
        return hashlib.sha256(f.read(min(offset, TAIL))).hexdigest()


def _cached(cache: Path, path: Path, st: os.stat_result) -> tuple[Any, int] | None:
    """The cached state and offset, where they are still the log's."""
    try:
        doc = json.loads(cache.read_text(encoding="utf-8"))
        offset = doc["offset"]
        if (
            doc["version"] != VERSION
            or doc["file"] != [st.st_dev, st.st_ino]
            or not isinstance(offset, int)
            or not 0 <= offset <= st.st_size
            or doc["tail"] != _tail_digest(path, offset)
        ):
            return None
        return doc["state"], offset
    except (OSError, ValueError, KeyError, TypeError):
        return None


def view(path: Path, fold: Fold) -> Any:
    """`fold`'s state over every whole entry of the log at `path` (a fresh state where there is
    no log), reading only what was appended since the cache beside it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return fold.init()
    cache = path.with_name(f"{path.name}.{fold.name}.json")
    found = _cached(cache, path, st)
    state, start = found if found is not None else (fold.init(), 0)
    end = start
    for after, entry in scan(path, start):
        end = after
        if entry is not None:
            fold.step(state, entry)
    if found is None or end != start:
        _save(cache, path, st, state, end)
    return state


def _save(cache: Path, path: Path, st: os.stat_result, state: Any, offset: int) -> None:
    doc = {
        "version": VERSION,
        "file": [st.st_dev, st.st_ino],
        "offset": offset,
        "tail": _tail_digest(path, offset),
        "state": state,
    }
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, sort_keys=True)
        os.replace(tmp, cache)
    except OSError:
        # A cache that cannot be written costs the next reader a longer read, nothing more.
        tmp.unlink(missing_ok=True)
