"""Per-environment overrides: merge one environment's override into the base blueprint.

Mappings merge key by key; lists whose items are all mappings with a `name` merge item by item
by that name (new names are appended, and `{name: X, remove: true}` deletes item X); any other
value replaces the base's. The merge also
returns where each effective value came from, so an error in a merged value points at the
override's line, not at the base's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rackform.blueprint.yamlmap import Path

# An override that changed these would make a different kind of cluster, not the same cluster in
# another environment.
FIXED = (("purpose",), ("target", "type"))
REMOVE = "remove"


def _named(items: Any) -> bool:
    return isinstance(items, list) and all(
        isinstance(i, dict) and isinstance(i.get("name"), str) for i in items
    )


@dataclass(frozen=True)
class Unmatched:
    """An override item whose name is in no base item: a removal of nothing (always a
    mistake), or an addition (a mistake when the item does not stand on its own)."""

    raw: Path  # the override item in the file
    effective: Path | None  # where an addition landed in the effective blueprint
    name: str
    known: tuple[str, ...]  # the names the base has at that place
    remove: bool


def merge(
    base: Any, override: Any, env_path: Path, unmatched: list[Unmatched] | None = None
) -> tuple[Any, dict[Path, Path]]:
    """Return the merged value and a map from each effective path to the raw document path it
    came from (base paths are their own origin; overridden ones point into `env_path`).
    Override items that name no base item are appended to `unmatched` when it is given."""
    origin: dict[Path, Path] = {}
    value = _merge(base, override, (), (), env_path, origin, unmatched)
    return value, origin


def origin_of(origin: dict[Path, Path], path: Path) -> Path:
    """Where in the file the value at effective `path` was written, from the map `merge`
    returned (a path with no recorded ancestor is its own origin, as in the base blueprint)."""
    for cut in range(len(path), -1, -1):  # nearest ancestor with a known origin
        if path[:cut] in origin:
            return origin[path[:cut]] + path[cut:]
    return path


def as_written(origin: dict[Path, Path], path: Path) -> Path:
    """The path of effective `path` as the file has it: under the environment's override
    where the value came from there (`environments.ENV.` dropped: a problem's `[env ENV]` tag
    says it), else the base's. Item indexes differ from the effective ones: override items
    merge into the base's list by name, and a removal shifts the items after it."""
    raw = origin_of(origin, path)
    if raw != path and raw[:1] == ("environments",) and len(raw) > 2:
        return raw[2:]
    return raw


def _mark(value: Any, eff: Path, raw: Path, origin: dict[Path, Path]) -> None:
    origin[eff] = raw
    if isinstance(value, dict):
        for k, v in value.items():
            _mark(v, (*eff, k), (*raw, k), origin)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _mark(v, (*eff, i), (*raw, i), origin)


def _merge(
    base: Any,
    over: Any,
    eff: Path,
    braw: Path,
    oraw: Path,
    origin: dict,
    unmatched: list[Unmatched] | None = None,
) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        origin[eff] = braw
        out = {}
        for k in [*base, *(k for k in over if k not in base)]:
            if k not in over:
                out[k] = base[k]
                _mark(base[k], (*eff, k), (*braw, k), origin)
            elif k not in base:
                out[k] = over[k]
                _mark(over[k], (*eff, k), (*oraw, k), origin)
            else:
                out[k] = _merge(
                    base[k], over[k], (*eff, k), (*braw, k), (*oraw, k), origin, unmatched
                )
        return out
    if _named(base) and _named(over):
        origin[eff] = braw
        # Each slot: (base item or None, its raw path, override item or None, its raw path).
        slots = [[item, (*braw, i), None, None] for i, item in enumerate(base)]
        index = {item["name"]: slot for item, slot in zip(base, slots, strict=True)}
        known = tuple(item["name"] for item in base)
        added: list[tuple[str, Path]] = []
        for j, item in enumerate(over):
            slot = index.get(item["name"])
            if item.get(REMOVE) is True and set(item) == {"name", REMOVE}:
                if slot is not None:
                    slots.remove(slot)
                elif unmatched is not None:
                    unmatched.append(Unmatched((*oraw, j), None, item["name"], known, True))
                continue
            if slot is None:
                slot = index[item["name"]] = [None, None, None, None]
                slots.append(slot)
                added.append((item["name"], (*oraw, j)))
            slot[2:] = [item, (*oraw, j)]
        merged = []
        for k, (bitem, bpath, oitem, opath) in enumerate(slots):
            if bitem is not None and oitem is not None:
                merged.append(_merge(bitem, oitem, (*eff, k), bpath, opath, origin, unmatched))
            else:
                merged.append(oitem if bitem is None else bitem)
                _mark(merged[-1], (*eff, k), opath if bitem is None else bpath, origin)
                if bitem is None and unmatched is not None:
                    name = oitem["name"]
                    raw = next(r for n, r in added if n == name)
                    unmatched.append(Unmatched(raw, (*eff, k), name, known, False))
        return merged
    _mark(over, eff, oraw, origin)
    return over


def changed_fixed_fields(base: dict, override: dict) -> list[Path]:
    """Paths in FIXED that the override sets to something other than the base."""
    out = []
    for path in FIXED:
        b, o = base, override
        for step in path:
            b = b.get(step) if isinstance(b, dict) else None
            o = o.get(step) if isinstance(o, dict) else None
        if o is not None and o != b:
            out.append(path)
    return out
