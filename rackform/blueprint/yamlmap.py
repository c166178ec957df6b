"""YAML reading that remembers where every value came from.

PyYAML composes a node tree with marks; we build plain Python values from it ourselves so that
(a) duplicate keys are an error instead of silently last-wins, and (b) every path in the
document maps to the line and column of its key and of its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple[str | int, ...]
MAX_VALUES = 100_000


@dataclass(frozen=True)
class Loc:
    line: int  # 1-based
    col: int  # 1-based


@dataclass
class Located:
    """A parsed YAML document with the position of every key and value by path."""

    data: Any
    keys: dict[Path, Loc] = field(default_factory=dict)
    values: dict[Path, Loc] = field(default_factory=dict)

    def locate(self, path: Path, *, key: bool = False) -> Loc:
        """The position of `path`, or of its nearest ancestor that exists in the file."""
        while True:
            table = self.keys if key and path in self.keys else self.values
            if path in table:
                return table[path]
            if not path:
                return Loc(1, 1)
            path = path[:-1]


@dataclass(frozen=True)
class YamlProblem:
    loc: Loc
    message: str
    fix: str = ""


class YamlProblems(Exception):
    def __init__(self, problems: list[YamlProblem]):
        self.problems = problems
        super().__init__("; ".join(p.message for p in problems))


def _loc(mark: yaml.Mark) -> Loc:
    return Loc(mark.line + 1, mark.column + 1)


def parse(text: str) -> Located:
    """Parse one YAML document. Raises YamlProblems for syntax errors, several documents,
    duplicate keys and non-scalar keys (all duplicates are reported, not only the first)."""
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = _loc(mark) if mark else Loc(1, 1)
        raise YamlProblems([YamlProblem(loc, f"invalid YAML: {exc.problem or exc}")]) from None
    except yaml.YAMLError as exc:
        raise YamlProblems([YamlProblem(Loc(1, 1), f"invalid YAML: {exc}")]) from None
    nodes = [n for n in nodes if n is not None]
    if len(nodes) > 1:
        raise YamlProblems(
            [
                YamlProblem(
                    _loc(nodes[1].start_mark),
                    "more than one YAML document",
                    "one blueprint per file: split the documents into separate files",
                )
            ]
        )
    out = Located(data=None)
    if not nodes:
        return out
    constructor = yaml.SafeLoader("")
    problems: list[YamlProblem] = []
    active: set[int] = set()  # nodes being built: an alias back into one is a cycle

    def build(node: yaml.Node, path: Path) -> Any:
        out.values[path] = _loc(node.start_mark)
        if len(out.values) > MAX_VALUES:
            raise YamlProblems(
                [
                    YamlProblem(
                        _loc(node.start_mark),
                        f"document expands to more than {MAX_VALUES} values (alias bomb?)",
                    )
                ]
            )
        if id(node) in active:
            raise YamlProblems(
                [YamlProblem(_loc(node.start_mark), "an alias refers to a value that contains it")]
            )
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            active.add(id(node))
            try:
                return build_collection(node, path)
            finally:
                active.discard(id(node))
        return constructor.construct_object(node, deep=True)

    def build_collection(node: yaml.Node, path: Path) -> Any:
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    problems.append(
                        YamlProblem(_loc(knode.start_mark), "a mapping key must be a plain value")
                    )
                    continue
                key = constructor.construct_object(knode)
                if key == "<<":
                    problems.append(
                        YamlProblem(
                            _loc(knode.start_mark),
                            "YAML merge keys (<<) are not supported",
                            "use `environments` overrides instead",
                        )
                    )
                    continue
                if not isinstance(key, str):
                    key = str(key)
                if key in result:
                    first = out.keys[(*path, key)]
                    problems.append(
                        YamlProblem(
                            _loc(knode.start_mark),
                            f"duplicate key {key!r} (first at line {first.line})",
                            "remove one of them; rackform never keeps the last silently",
                        )
                    )
                    continue
                out.keys[(*path, key)] = _loc(knode.start_mark)
                result[key] = build(vnode, (*path, key))
            return result
        return [build(item, (*path, i)) for i, item in enumerate(node.value)]

    out.data = build(nodes[0], ())
    if problems:
        raise YamlProblems(problems)
    return out
