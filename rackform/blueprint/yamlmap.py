"""YAML reading that remembers where every value came from.

PyYAML composes a node tree with marks; we build plain Python values from it ourselves so that
(a) duplicate keys are an error instead of silently last-wins, and (b) every path in the
document maps to the line and column of its key and of its value.

Two limits keep any input a located problem rather than an internal error: lists and mappings
nest at most MAX_DEPTH deep (PyYAML's composer, our build and everything after them recurse once
per level; the composer is stopped at the first collection too deep, before it recurses), and a
document holds at most MAX_VALUES values once its aliases are expanded (an alias bomb expands
exponentially; a plain document is bounded by its own size).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

Path = tuple[str | int, ...]
MAX_VALUES = 100_000
# Lists and mappings inside each other. The example blueprints nest 5 to 7 deep; 64 is far beyond
# any blueprint, and far below Python's recursion limit (each level is a few frames).
MAX_DEPTH = 64


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


def _too_deep(loc: Loc, via_alias: bool = False) -> YamlProblems:
    if via_alias:
        message = (
            f"lists and mappings nested more than {MAX_DEPTH} deep through the alias used here"
        )
        fix = "write the value out, or use fewer aliases of aliases"
    else:
        message = f"lists and mappings nested more than {MAX_DEPTH} deep"
        fix = (
            "a blueprint nests a few levels deep (the examples at most 7): look for unclosed "
            "brackets or runaway indentation"
        )
    return YamlProblems([YamlProblem(loc, message, fix)])


class _Limits:
    """PyYAML's composer with the nesting limit, noting where aliases are used, over the safe
    loader's scanner and parser (`loader`).

    PyYAML's composer recurses once per level of nesting; a collection deeper than MAX_DEPTH is
    refused at its start, before the composer goes further, so the recursion stays shallow
    whatever the input (its scanner and parser are iterative)."""

    loader: ClassVar[type]

    def __init__(self, text: str):
        self.loader.__init__(self, text)
        yaml.composer.Composer.__init__(self)  # the loader's own may be libyaml's, in C
        self.depth = 0
        # (id of the parent node, list index or id of the key node) -> where an alias is used
        self.aliases: dict[tuple[int, int], Loc] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if parent is not None and index is not None and self.check_event(yaml.AliasEvent):
            self.aliases[_slot(parent, index)] = _loc(self.peek_event().start_mark)
        return super().compose_node(parent, index)

    @contextmanager
    def _level(self) -> Iterator[None]:
        """One level deeper while a collection is composed, refused past MAX_DEPTH."""
        if self.depth >= MAX_DEPTH:
            raise _too_deep(_loc(self.peek_event().start_mark))
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def compose_sequence_node(self, anchor: str | None) -> yaml.Node:
        with self._level():
            return super().compose_sequence_node(anchor)

    def compose_mapping_node(self, anchor: str | None) -> yaml.Node:
        with self._level():
            return super().compose_mapping_node(anchor)


def _slot(parent: yaml.Node, index: Any) -> tuple[int, int]:
    """A child's place in its parent: a list index, or the key node of a mapping value."""
    return id(parent), index if isinstance(index, int) else id(index)


class _Composer(_Limits, yaml.SafeLoader):
    """The composer over PyYAML's pure-Python scanner and parser."""

    loader = yaml.SafeLoader


# The same composer (in Python, with its limits) over libyaml's scanner and parser, where PyYAML
# was built with it: the same nodes and marks at a quarter of the cost (a 4,096-host blueprint:
# 0.2 s instead of 0.8 s). A document it refuses is read again by the pure-Python parser, so
# every refusal says what it always said.
def _libyaml_composer() -> type[_Limits] | None:
    if not getattr(yaml, "__with_libyaml__", False):
        return None

    class _FastComposer(_Limits, yaml.composer.Composer, yaml.CSafeLoader):
        loader = yaml.CSafeLoader

    return _FastComposer


_FAST = _libyaml_composer()


def _compose(text: str) -> tuple[list[yaml.Node], dict[tuple[int, int], Loc]]:
    if _FAST is not None:
        try:
            return _compose_with(_FAST, text)
        except (yaml.YAMLError, YamlProblems):
            pass  # the pure-Python parser's own words, below
    return _compose_with(_Composer, text)


def _compose_with(
    composer: type[_Limits], text: str
) -> tuple[list[yaml.Node], dict[tuple[int, int], Loc]]:
    loader = composer(text)
    try:
        nodes = []
        while loader.check_node():
            nodes.append(loader.get_node())
        return nodes, loader.aliases
    finally:
        loader.dispose()


def expanded_size(root: yaml.Node) -> int | None:
    """How many values `root` builds into, aliases expanded (keys not counted, as `build`
    counts them); None when an alias refers to a value that contains it. Iterative, and each
    node is counted once however often it is referred to, so an alias bomb costs no more than
    its text."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size:
            continue
        children = [v for _, v in node.value] if isinstance(node, yaml.MappingNode) else []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if done:
            on_path.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            continue
        if id(node) in on_path:
            return None
        on_path.add(id(node))
        stack.append((node, True))
        for c in children:
            if id(c) in on_path:
                return None
            if id(c) not in size:
                stack.append((c, False))
    return size[id(root)]


def parse(text: str) -> Located:
    """Parse one YAML document. Raises YamlProblems for syntax errors, several documents,
    duplicate keys, non-scalar keys (all duplicates are reported, not only the first), nesting
    deeper than MAX_DEPTH and more than MAX_VALUES values."""
    try:
        nodes, aliases = _compose(text)
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

    def too_many(node: yaml.Node, alias: Loc | None) -> YamlProblems:
        """The values limit, with how many values the document has; aliases are named only when
        the limit is reached expanding one."""
        total = expanded_size(nodes[0])
        if alias is None:
            count = f"{total:,}" if total is not None else f"more than {MAX_VALUES:,}"
            return YamlProblems(
                [
                    YamlProblem(
                        _loc(node.start_mark),
                        f"the document has {count} values, more than the {MAX_VALUES:,} a "
                        "blueprint may have; the limit is reached here",
                        "one blueprint per cluster: split the file",
                    )
                ]
            )
        count = f"{total:,} values" if total is not None else "values without end"
        return YamlProblems(
            [
                YamlProblem(
                    alias,
                    f"through its aliases the document expands to {count}, more than the "
                    f"{MAX_VALUES:,} a blueprint may have (an alias bomb?); the limit is reached "
                    "expanding the alias used here",
                    "write the values out, or use fewer aliases of aliases",
                )
            ]
        )

    def build(node: yaml.Node, path: Path, alias: Loc | None) -> Any:
        """`alias`: where the outermost alias being expanded is used (None outside any)."""
        out.values[path] = _loc(node.start_mark)
        if len(out.values) > MAX_VALUES:
            raise too_many(node, alias)
        if id(node) in active:
            raise YamlProblems(
                [
                    YamlProblem(
                        alias or _loc(node.start_mark),
                        "an alias refers to a value that contains it",
                    )
                ]
            )
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            if len(path) >= MAX_DEPTH:
                # The composer checked the text; only an alias can nest a value deeper.
                raise _too_deep(alias or _loc(node.start_mark), via_alias=alias is not None)
            active.add(id(node))
            try:
                return build_collection(node, path, alias)
            finally:
                active.discard(id(node))
        return constructor.construct_object(node, deep=True)

    def build_collection(node: yaml.Node, path: Path, alias: Loc | None) -> Any:
        # Outside any alias, a child may be one; inside, the outermost is already known.
        used = aliases if aliases and alias is None else {}
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
                at = used.get((id(node), id(knode)), alias) if used else alias
                result[key] = build(vnode, (*path, key), at)
            return result
        if used:
            return [
                build(item, (*path, i), used.get((id(node), i)))
                for i, item in enumerate(node.value)
            ]
        return [build(item, (*path, i), alias) for i, item in enumerate(node.value)]

    out.data = build(nodes[0], (), None)
    if problems:
        raise YamlProblems(problems)
    return out
