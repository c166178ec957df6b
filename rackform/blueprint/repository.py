"""The blueprints a repository keeps beside one another: every environment (the base included)
of every blueprint file in one directory, each a stack `up` may create. The engine reads them
once per state of the directory and hands them to compile, so a preflight rule that counts a
repository's stacks (AWS's default quotas) reads the plan, never the disk.

Files there that are not valid blueprints (or not blueprints at all) are left out: their own
validation says what is wrong with them."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from rackform.blueprint.loader import Effective, load_all
from rackform.blueprint.problems import BlueprintError


def _files(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, mtime, size) of each YAML file: what the blueprints are read from, and the key
    that says when to read them again."""
    files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)


@lru_cache(maxsize=64)
def _read(directory: Path, files: tuple[tuple[str, int, int], ...]) -> tuple[Effective, ...]:
    out: list[Effective] = []
    for name, _, _ in files:
        try:
            out += load_all(directory / name)
        except (BlueprintError, OSError):
            continue  # not a blueprint, or not a valid one: its own validation says so
    return tuple(out)


def siblings(directory: Path) -> tuple[Effective, ...]:
    """Every environment of every valid blueprint in `directory` (none when it cannot be
    listed)."""
    try:
        files = _files(directory)
    except OSError:
        return ()
    return _read(directory, files)
