"""Why a blueprint is wrong, in the user's words: located problems with a fix.

pydantic reports errors by model path, with union tags in it and messages written for
programmers; this turns each into a `Problem` at the line and column the user wrote (through the
environment's origin map when the value came from an override), with the field's name as the
user spelled it and a hint: the nearest known field for a typo, the field's description for a
value out of pattern, quoting for a number YAML read where text was meant. It also explains the
override items `environments.merge` could not match to a base item. `loader` is the only caller.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from rackform.blueprint.environments import Unmatched, as_written, origin_of
from rackform.blueprint.problems import Problem, dotted
from rackform.blueprint.schema.base import RuleViolations, closest
from rackform.blueprint.schema.model import Blueprint
from rackform.blueprint.targets.schemas import SCHEMAS
from rackform.blueprint.yamlmap import Located, Path


def validation_problems(
    name: str, doc: Located, data: Any, origin: dict, exc: ValidationError
) -> list[Problem]:
    """Each error of a blueprint that did not validate, at the value (or key) the user wrote
    and under the path they wrote; a cross-field rule's violations each at their own field."""
    out: list[Problem] = []
    errors = exc.errors()
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "too_short" and any(
            len(o["loc"]) > len(loc) and tuple(o["loc"][: len(loc)]) == loc for o in errors
        ):
            continue  # a list whose items failed also looks too short: report the items only
        path = _strip_tags(loc, data)
        if err["type"] == "union_tag_invalid":
            path = (*path, "type")  # point at the wrong tag itself
        ctx = err.get("ctx") or {}
        if isinstance(ctx.get("error"), RuleViolations):
            for v in ctx["error"].violations:
                out.append(
                    located(name, doc, origin, (*path, *v.path), v.message, v.fix, key=False)
                )
            continue
        message, fix, key = _explain(err, path, data)
        out.append(located(name, doc, origin, path, message, fix, key=key))
    return out


def located(
    name: str, doc: Located, origin: dict, path: Path, message: str, fix: str, key: bool
) -> Problem:
    """A problem about the effective `path`, at the place in the file its value came from and
    under the path it has there (`as_written`: an override's item `[2]` may be the effective
    list's `[1]`)."""
    loc = doc.locate(origin_of(origin, path), key=key)
    return Problem(name, loc.line, loc.col, dotted(as_written(origin, path)), message, fix)


def _strip_tags(loc: Path, data: Any) -> Path:
    """pydantic puts union tags (`aws`, `list[str]`...) into error locations; keep only the
    steps that exist in the document, so the path is what the user wrote."""
    out: list[str | int] = []
    cur = data
    for step in loc:
        if (isinstance(cur, dict) and step in cur) or (
            isinstance(cur, list) and isinstance(step, int) and 0 <= step < len(cur)
        ):
            cur = cur[step]
        elif (
            isinstance(cur, dict)
            and isinstance(step, str)
            and (
                step == cur.get("type")
                or "[" in step
                or step in ("str", "int", "float", "bool", "function-after")
            )
        ):
            continue
        else:
            cur = None
        out.append(step)
    return tuple(out)


def _explain(err: dict, path: Path, data: Any) -> tuple[str, str, bool]:
    """Message, fix hint, and whether the error belongs at the key (True) or the value."""
    kind, msg, value = err["type"], err["msg"], err.get("input")
    msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind == "extra_forbidden":
        fields = _fields_at(path[:-1], data)
        return (
            f"unknown field {path[-1]!r}",
            (closest(str(path[-1]), fields) if fields else ""),
            True,
        )
    if kind == "missing":
        return f"required field {path[-1]!r} is missing", f"add `{path[-1]}:`", False
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        return msg, f'quote it: "{value}" (YAML reads unquoted {value} as a number)', False
    if kind == "string_pattern_mismatch":
        return f"{value!r} is not allowed here", _description(path, data), False
    if kind == "union_tag_invalid":
        tag, expected = (
            (err.get("ctx") or {}).get("tag"),
            (err.get("ctx") or {}).get("expected_tags", ""),
        )
        return f"unknown type {tag!r}", f"one of: {expected}".replace("'", ""), False
    if kind == "union_tag_not_found":
        return "the target needs a `type`", "add type: " + " | ".join(SCHEMAS), True
    if kind.endswith("_type") and value is None:
        return f"{msg} (the value is empty)", "give a value or remove the key", False
    return msg, "", False


def _fields_at(path: Path, data: Any) -> list[str]:
    """Names of the fields the model at `path` accepts (for 'did you mean' hints)."""
    model = _model_at(path, data)
    return list(model.model_fields) if model else []


def _description(path: Path, data: Any) -> str:
    model = _model_at(path[:-1], data)
    field = model.model_fields.get(path[-1]) if model and path else None
    return (field.description or "") if field else ""


def _model_at(path: Path, data: Any) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at `path`, if any."""
    tp: Any = Blueprint
    cur = data
    for step in path:
        tp = _unwrap(tp, cur)
        if isinstance(tp, type) and issubclass(tp, BaseModel) and step in tp.model_fields:
            tp = tp.model_fields[step].annotation
        elif typing.get_origin(tp) in (list, tuple):
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
        cur = cur[step] if isinstance(cur, dict | list) and _has(cur, step) else None
    tp = _unwrap(tp, cur)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _has(cur: Any, step: Any) -> bool:
    return step in cur if isinstance(cur, dict) else isinstance(step, int) and step < len(cur)


def _unwrap(tp: Any, cur: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            models = [
                a for a in typing.get_args(tp) if isinstance(a, type) and issubclass(a, BaseModel)
            ]
            tag = cur.get("type") if isinstance(cur, dict) else None
            match = [
                m
                for m in models
                if "type" in m.model_fields
                and tag in typing.get_args(m.model_fields["type"].annotation)
            ]
            if match:
                tp = match[0]
            elif len(models) == 1:
                tp = models[0]
            else:
                return tp
        else:
            return tp


def removals_of_nothing(name: str, doc: Located, unmatched: list[Unmatched]) -> list[Problem]:
    """`{name: X, remove: true}` where the base has no X: a typo that would leave X in place."""
    return [
        _at_name(
            name, doc, u, f"there is no {u.name!r} to remove (the base has: {', '.join(u.known)})"
        )
        for u in unmatched
        if u.remove
    ]


def incomplete_additions(
    name: str, doc: Located, unmatched: list[Unmatched], exc: ValidationError
) -> list[Problem]:
    """An override item whose name the base does not have is added as a new item; when it does
    not validate on its own, it was most likely meant to override an existing one."""
    out = []
    failed = []
    for e in exc.errors():
        ctx = e.get("ctx") or {}
        if isinstance(ctx.get("error"), RuleViolations):  # cross-field rules: their own paths
            failed += [(*e["loc"], *v.path) for v in ctx["error"].violations]
        else:
            failed.append(tuple(e["loc"]))
    for u in unmatched:
        if u.remove or u.effective is None:
            continue
        if not any(loc[: len(u.effective)] == u.effective for loc in failed):
            continue
        out.append(
            _at_name(
                name,
                doc,
                u,
                f"{u.name!r} is not in the base (it has: {', '.join(u.known)}), so this adds a "
                "new item, and the item is not complete on its own",
            )
        )
    return out


def _at_name(name: str, doc: Located, u: Unmatched, message: str) -> Problem:
    """A problem at the `name:` of an unmatched override item, with the nearest base name."""
    loc = doc.locate((*u.raw, "name"))
    fix = closest(u.name, list(u.known)) if u.known else ""
    return Problem(name, loc.line, loc.col, dotted((*u.raw, "name")), message, fix)
