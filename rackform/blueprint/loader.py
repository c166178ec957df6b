"""Blueprint YAML -> validated, effective Blueprint, with every mistake located in the file.

`load_effective(path, env)` and `load_all(path)` read the file once, refuse duplicate keys and
malformed YAML, apply each environment's override once and validate with pydantic; `explain`
turns every error (type errors and cross-field rules alike) into
`FILE:LINE:COL: field.path: message`. Each `Effective` keeps the parsed file and where each of
its values came from, so later steps (preflight findings, program errors) locate a field
without reading or merging anything again. `rackform.engine` is the only caller outside this
package.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path as FsPath

from pydantic import ValidationError

from rackform.blueprint.environments import (
    Unmatched,
    as_written,
    changed_fixed_fields,
    merge,
    origin_of,
)
from rackform.blueprint.explain import (
    incomplete_additions,
    located,
    removals_of_nothing,
    validation_problems,
)
from rackform.blueprint.problems import BlueprintError, Problem, dotted
from rackform.blueprint.schema.base import closest
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
    # The file's promotion rules, (target, source) by target: the base blueprint's `promotion:`,
    # validated with the base, read here once for every environment (an environment's own
    # blueprint has them removed: they are about the file).
    promotion: tuple[tuple[str, str], ...] = ()

    @property
    def promoted_from(self) -> str | None:
        """The environment this one takes the blueprint from by promotion, or None."""
        return dict(self.promotion).get(self.environment)

    @property
    def env_label(self) -> str:
        """The environment as messages tag it: "" for the base blueprint."""
        return "" if self.environment == DEFAULT_ENV else self.environment

    def locate(self, path: Path, *, key: bool = False) -> Loc:
        """Where the user wrote the value at `path` of this effective blueprint: in the
        environment's override when it set the value, else in the base."""
        return self.doc.locate(origin_of(self.origin, path), key=key)

    def problem(self, path: Path, message: str, fix: str = "") -> Problem:
        """A located problem about the field at `path`."""
        loc = self.locate(path) if path else None
        return Problem(
            self.source,
            loc.line if loc else None,
            loc.col if loc else None,
            dotted(as_written(self.origin, path)) if path else "",
            message,
            fix,
            env=self.env_label,
        )


def environment_name(env: str | None) -> str:
    """What `--env` and `rackform:environment` mean: empty, None or "default" is the base."""
    return DEFAULT_ENV if env in (None, "") else env


# Fields added after blueprints were first digested, with the value that means "as before":
# where a blueprint leaves one at that value it is dropped from the digest, so a release that
# adds a field changes no existing blueprint's digest (its evidence still matches). Sections
# by their key in the dumped model; node groups' fields apply to each group.
LATER_FIELDS: dict[str, dict[str, object]] = {
    "workload": {
        "expert_parallel": 1,
        "checkpoint_async": False,
        "model": None,
        "serving": None,
        "min_nodes": None,
    },
    "lifecycle": {"mttr_alert_hours": 24.0, "failures_alert_node_share": 0.02},
}
# workload.model's fields added after it.
LATER_MODEL_FIELDS: dict[str, object] = {"path": None}
LATER_GROUP_FIELDS: dict[str, object] = {"market": None, "reservation_id": None, "system": None}


def _drop_later(section: object, later: dict[str, object]) -> None:
    if isinstance(section, dict):
        for key, value in later.items():
            if key in section and section[key] == value:
                del section[key]


def digest_of(blueprint: Blueprint) -> str:
    """Same effective content, same digest: canonical JSON of the validated model (defaults
    filled in, environments and the promotion policy dropped), so formatting, key order and
    comments do not count. A section or field added after blueprints were first digested
    (`image`, `topology`, and those in LATER_FIELDS) counts only where a blueprint sets it to
    something else than what it means by its absence: leaving it out changes nothing."""
    dropped = {"environments", "promotion"} | ({"image"} if blueprint.image is None else set())
    dropped |= {"topology"} if blueprint.topology is None else set()
    body = blueprint.model_dump(mode="json", exclude=dropped)
    for group in body["node_groups"]:
        _drop_later(group, LATER_GROUP_FIELDS)
    for section, later in LATER_FIELDS.items():
        _drop_later(body.get(section), later)
    _drop_later((body.get("workload") or {}).get("model"), LATER_MODEL_FIELDS)
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
    """The validated blueprint of one environment (None or "default": the base blueprint).
    An environment's needs the base valid too: its promotion rule is the base's."""
    name, doc, env = str(path), read(path), environment_name(env)
    base = _effective(name, doc, DEFAULT_ENV)
    if env == DEFAULT_ENV:
        return _promoted(base, base)
    return _promoted(_effective(name, doc, env), base)


def _promoted(effective: Effective, base: Effective) -> Effective:
    """`effective` with the promotion rules the base blueprint declares."""
    rules = tuple(sorted((t, r.source) for t, r in base.blueprint.promotion.items()))
    return dataclasses.replace(effective, promotion=rules)


def load_all(path: str | FsPath) -> list[Effective]:
    """The base blueprint and every environment it names, from one read of the file, all
    validated; every problem in any of them is reported at once (each at most once)."""
    name = str(path)
    doc = read(path)
    results, problems = [], []
    seen: set[Problem] = set()
    base: Effective | None = None
    for env in [DEFAULT_ENV, *(e for e in environments(doc) if e != DEFAULT_ENV)]:
        try:
            effective = _effective(name, doc, env)
            if env == DEFAULT_ENV:
                base = effective
            results.append(effective if base is None else _promoted(effective, base))
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
            valid = [DEFAULT_ENV, *(k for k in known if k != DEFAULT_ENV)]
            raise BlueprintError(
                [
                    _at(
                        name,
                        doc,
                        ("environments",),
                        f"unknown environment {env!r} (valid: {', '.join(valid)})",
                        closest(env, valid),
                        key=True,
                    )
                ]
            )
        override = doc.data["environments"][env]
        env_path: Path = ("environments", env)
        if override is None:
            override = {}
        if not isinstance(override, dict):
            raise BlueprintError(
                [
                    _at(
                        name,
                        doc,
                        env_path,
                        "an environment override must be a mapping of fields",
                        "write e.g. dev: {node_groups: [{name: gpu, count: 1}]}",
                    )
                ]
            )
        if "environments" in override:
            problems.append(
                _at(
                    name,
                    doc,
                    (*env_path, "environments"),
                    "an environment cannot declare environments",
                    key=True,
                )
            )
        for fixed in changed_fixed_fields(doc.data, override):
            problems.append(
                _at(
                    name,
                    doc,
                    (*env_path, *fixed),
                    f"an environment may not change {dotted(fixed)}",
                    "declare a separate blueprint for a different kind of cluster",
                )
            )
            override = _without(override, fixed)  # report it, and validate the rest
        if "promotion" in override:
            problems.append(
                _at(
                    name,
                    doc,
                    (*env_path, "promotion"),
                    "promotion is declared once, in the base blueprint",
                    f"move it to the top level: promotion: {{{env}: {{from: ...}}}}",
                    key=True,
                )
            )
        # Promotion is about the file's environments, not one environment's cluster.
        top = ("environments", "promotion")
        override = {k: v for k, v in override.items() if k not in top}
        base = {k: v for k, v in doc.data.items() if k not in top}
        unmatched: list[Unmatched] = []
        data, origin = merge(base, override, env_path, unmatched)
        data["environments"] = {}
        problems += removals_of_nothing(name, doc, unmatched)
    else:
        unmatched = []
    try:
        bp = Blueprint.model_validate(data)
    except ValidationError as exc:
        problems += validation_problems(name, doc, data, origin, exc)
        problems += incomplete_additions(name, doc, unmatched, exc)
        seen = {p.path for p in problems}
        for v in partial_rules(data):
            p = located(name, doc, origin, v.path, v.message, v.fix, key=False)
            if p.path not in seen:
                problems.append(p)
        # In the order of the file, whichever check found them.
        problems.sort(key=lambda p: (p.line or 0, p.col or 0))
    label = "" if env == DEFAULT_ENV else env
    if problems:
        raise BlueprintError([dataclasses.replace(p, env=label) for p in problems])
    path = FsPath(name).expanduser().resolve()
    return Effective(name, env, bp, digest_of(bp), path, doc, origin)


def _at(name: str, doc: Located, path: Path, message: str, fix: str = "", *, key=False) -> Problem:
    """A problem about the field at `path` of the file itself (not of an effective blueprint)."""
    return located(name, doc, {}, path, message, fix, key)


def _without(tree: dict, path: Path) -> dict:
    """A copy of `tree` without the leaf at `path`."""
    head, *rest = path
    out = dict(tree)
    if rest and isinstance(out.get(head), dict):
        out[head] = _without(out[head], tuple(rest))
    else:
        out.pop(head, None)
    return out
