"""Blueprint YAML -> validated, effective Blueprint, with every mistake located in the file.

`load(path, env)` reads the file once, refuses duplicate keys and malformed YAML, applies each
environment's override once, validates with pydantic, and turns every error (type errors and
cross-field rules alike) into `FILE:LINE:COL: field.path: message`. Each `Effective` keeps the
parsed file and where each of its values came from, so later steps (preflight findings, program
errors) locate a field without reading or merging anything again. `rackform.engine` is the
only caller outside this package.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from pydantic import BaseModel, ValidationError

from rackform.blueprint.environments import Unmatched, changed_fixed_fields, merge
from rackform.blueprint.problems import BlueprintError, Problem, dotted
from rackform.blueprint.schema.base import RuleViolations, closest
from rackform.blueprint.schema.model import DEFAULT_ENV, Blueprint, partial_rules
from rackform.blueprint.yamlmap import Loc, Located, Path, YamlProblems, parse


@dataclass(frozen=True)
class Effective:
    """One environment's blueprint: the base with that environment's override applied."""

    source: str  # the path as the user gave it (what messages show)
    environment: str  # DEFAULT_ENV for the base blueprint
    blueprint: Blueprint
    digest: str
    path: FsPath = field(compare=False)  # the same file, absolute
    doc: Located = field(repr=False, compare=False)
    origin: dict[Path, Path] = field(repr=False, compare=False)  # effective path -> file path

    @property
    def env_label(self) -> str:
        """The environment as messages tag it: "" for the base blueprint."""
        return "" if self.environment == DEFAULT_ENV else self.environment

    def locate(self, path: Path, *, key: bool = False) -> Loc:
        """Where the user wrote the value at `path` of this effective blueprint: in the
        environment's override when it set the value, else in the base."""
        return self.doc.locate(_raw(self.origin, path), key=key)

    def problem(self, path: Path, message: str, fix: str = "") -> Problem:
        """A located problem about the field at `path`."""
        loc = self.locate(path) if path else None
        return Problem(
            self.source,
            loc.line if loc else None,
            loc.col if loc else None,
            dotted(path) if path else "",
            message,
            fix,
            env=self.env_label,
        )


def environment_name(env: str | None) -> str:
    """What `--env` and `rackform:environment` mean: empty, None or "default" is the base."""
    return DEFAULT_ENV if env in (None, "") else env


def _raw(origin: dict[Path, Path], path: Path) -> Path:
    for cut in range(len(path), -1, -1):  # nearest ancestor with a known origin
        if path[:cut] in origin:
            return origin[path[:cut]] + path[cut:]
    return path


def digest_of(blueprint: Blueprint) -> str:
    """Same effective content, same digest: canonical JSON of the validated model (defaults
    filled in, environments and the promotion policy dropped), so formatting, key order and
    comments do not count."""
    body = blueprint.model_dump(mode="json", exclude={"environments", "promotion"})
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def read(path: str | FsPath) -> Located:
    """Read and parse a blueprint file; unreadable or malformed files are BlueprintErrors."""
    name = str(path)
    try:
        text = FsPath(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BlueprintError([Problem(name, None, None, "", "no such file")]) from None
    except IsADirectoryError:
        raise BlueprintError(
            [Problem(name, None, None, "", "is a directory, not a blueprint file")]
        ) from None
    except PermissionError:
        raise BlueprintError(
            [Problem(name, None, None, "", "cannot be read (permission denied)")]
        ) from None
    except UnicodeDecodeError as exc:
        raise BlueprintError(
            [Problem(name, None, None, "", f"is not UTF-8 text ({exc.reason} at byte {exc.start})")]
        ) from None
    except OSError as exc:
        raise BlueprintError(
            [Problem(name, None, None, "", f"cannot be read ({exc.strerror})")]
        ) from None
    try:
        doc = parse(text)
    except YamlProblems as exc:
        raise BlueprintError(
            [Problem(name, p.loc.line, p.loc.col, "", p.message, p.fix) for p in exc.problems]
        ) from None
    if doc.data is None:
        raise BlueprintError(
            [
                Problem(
                    name, 1, 1, "", "the file is empty", "start from an example under blueprints/"
                )
            ]
        )
    if not isinstance(doc.data, dict):
        kind = type(doc.data).__name__
        raise BlueprintError(
            [
                Problem(
                    name,
                    1,
                    1,
                    "",
                    f"the top level is a {kind}, not a mapping of fields",
                    "a blueprint starts with `name:`, `purpose:`, ...",
                )
            ]
        )
    return doc


def environments(doc: Located) -> list[str]:
    envs = doc.data.get("environments")
    return list(envs) if isinstance(envs, dict) else []


def load_effective(path: str | FsPath, env: str | None = None) -> Effective:
    """The validated blueprint of one environment (None or "default": the base blueprint)."""
    return _effective(str(path), read(path), environment_name(env))


def load_all(path: str | FsPath) -> list[Effective]:
    """The base blueprint and every environment it names, from one read of the file, all
    validated; every problem in any of them is reported at once (each at most once)."""
    name = str(path)
    doc = read(path)
    results, problems = [], []
    seen: set[Problem] = set()
    for env in [DEFAULT_ENV, *(e for e in environments(doc) if e != DEFAULT_ENV)]:
        try:
            results.append(_effective(name, doc, env))
        except BlueprintError as exc:
            for p in exc.problems:
                # A mistake in the base shows in every environment: report it once.
                if dataclasses.replace(p, env="") not in seen:
                    seen.add(dataclasses.replace(p, env=""))
                    problems.append(p)
    if problems:
        raise BlueprintError(problems)
    return results


def _effective(name: str, doc: Located, env: str) -> Effective:
    data, origin = doc.data, {}
    problems: list[Problem] = []
    if env != DEFAULT_ENV:
        known = environments(doc)
        if env not in known:
            loc = doc.locate(("environments",), key=True)
            valid = [DEFAULT_ENV, *(k for k in known if k != DEFAULT_ENV)]
            raise BlueprintError(
                [
                    Problem(
                        name,
                        loc.line,
                        loc.col,
                        "environments",
                        f"unknown environment {env!r} (valid: {', '.join(valid)})",
                        closest(env, valid),
                    )
                ]
            )
        override = doc.data["environments"][env]
        env_path: Path = ("environments", env)
        if override is None:
            override = {}
        if not isinstance(override, dict):
            loc = doc.locate(env_path)
            raise BlueprintError(
                [
                    Problem(
                        name,
                        loc.line,
                        loc.col,
                        dotted(env_path),
                        "an environment override must be a mapping of fields",
                        "write e.g. dev: {node_groups: [{name: gpu, count: 1}]}",
                    )
                ]
            )
        if "environments" in override:
            loc = doc.locate((*env_path, "environments"), key=True)
            problems.append(
                Problem(
                    name,
                    loc.line,
                    loc.col,
                    dotted((*env_path, "environments")),
                    "an environment cannot declare environments",
                )
            )
        for fixed in changed_fixed_fields(doc.data, override):
            loc = doc.locate((*env_path, *fixed))
            problems.append(
                Problem(
                    name,
                    loc.line,
                    loc.col,
                    dotted((*env_path, *fixed)),
                    f"an environment may not change {dotted(fixed)}",
                    "declare a separate blueprint for a different kind of cluster",
                )
            )
            override = _without(override, fixed)  # report it, and validate the rest
        if "promotion" in override:
            loc = doc.locate((*env_path, "promotion"), key=True)
            problems.append(
                Problem(
                    name,
                    loc.line,
                    loc.col,
                    dotted((*env_path, "promotion")),
                    "promotion is declared once, in the base blueprint",
                    f"move it to the top level: promotion: {{{env}: {{from: ...}}}}",
                )
            )
        # Promotion is about the file's environments, not one environment's cluster.
        top = ("environments", "promotion")
        override = {k: v for k, v in override.items() if k not in top}
        base = {k: v for k, v in doc.data.items() if k not in top}
        unmatched: list[Unmatched] = []
        data, origin = merge(base, override, env_path, unmatched)
        data["environments"] = {}
        problems += _removals_of_nothing(name, doc, unmatched)
    else:
        unmatched = []
    try:
        bp = Blueprint.model_validate(data)
    except ValidationError as exc:
        problems += _problems(name, doc, data, origin, exc)
        problems += _incomplete_additions(name, doc, unmatched, exc)
        seen = {p.path for p in problems}
        for v in partial_rules(data):
            p = _located(name, doc, origin, v.path, v.message, v.fix, key=False)
            if p.path not in seen:
                problems.append(p)
        # In the order of the file, whichever check found them.
        problems.sort(key=lambda p: (p.line or 0, p.col or 0))
    label = "" if env == DEFAULT_ENV else env
    if problems:
        raise BlueprintError([dataclasses.replace(p, env=label) for p in problems])
    path = FsPath(name).expanduser().resolve()
    return Effective(name, env, bp, digest_of(bp), path, doc, origin)


def _at_name(name: str, doc: Located, u: Unmatched, message: str) -> Problem:
    """A problem at the `name:` of an unmatched override item, with the nearest base name."""
    loc = doc.locate((*u.raw, "name"))
    fix = closest(u.name, list(u.known)) if u.known else ""
    return Problem(name, loc.line, loc.col, dotted((*u.raw, "name")), message, fix)


def _removals_of_nothing(name: str, doc: Located, unmatched: list[Unmatched]) -> list[Problem]:
    """`{name: X, remove: true}` where the base has no X: a typo that would leave X in place."""
    return [
        _at_name(
            name, doc, u, f"there is no {u.name!r} to remove (the base has: {', '.join(u.known)})"
        )
        for u in unmatched
        if u.remove
    ]


def _incomplete_additions(
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


def _without(tree: dict, path: Path) -> dict:
    """A copy of `tree` without the leaf at `path`."""
    head, *rest = path
    out = dict(tree)
    if rest and isinstance(out.get(head), dict):
        out[head] = _without(out[head], tuple(rest))
    else:
        out.pop(head, None)
    return out


def _problems(
    name: str, doc: Located, data: Any, origin: dict, exc: ValidationError
) -> list[Problem]:
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
                    _located(name, doc, origin, (*path, *v.path), v.message, v.fix, key=False)
                )
            continue
        message, fix, key = _explain(err, path, data)
        out.append(_located(name, doc, origin, path, message, fix, key=key))
    return out


def _located(
    name, doc: Located, origin: dict, path: Path, message: str, fix: str, key: bool
) -> Problem:
    loc = doc.locate(_raw(origin, path), key=key)
    return Problem(name, loc.line, loc.col, dotted(path), message, fix)


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
        return "the target needs a `type`", "add type: aws | bare_metal | colocation", True
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
