"""Property: any mutation of a valid blueprint (delete, rename, retype, duplicate, nest keys)
either loads or fails with exit 2 and located messages, never a traceback."""

from __future__ import annotations

import copy

import yaml
from blueprint_helpers import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackform.blueprint.loader import load_all
from rackform.blueprint.problems import BlueprintError
from rackform.cli.main import app

BASES = [yaml.safe_load(p.read_text()) for p in EXAMPLES]
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw):
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        key = path[-1]
        op = draw(st.sampled_from(["delete", "rename", "retype", "nest"]))
        if op == "delete":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = parent.pop(key)
        elif op == "retype":
            parent[key] = draw(ODD_VALUES)
        elif op == "nest":
            parent[key] = {draw(st.sampled_from(["value", "type", "name", "x"])): parent[key]}
    text = yaml.safe_dump(doc, sort_keys=False)
    if draw(st.booleans()) and isinstance(doc, dict) and doc:
        first = next(iter(doc))
        text += yaml.safe_dump({first: doc[first]}, sort_keys=False)  # a duplicate top-level key
    return text


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=mutated())
def test_mutations_load_or_fail_located(tmp_path, text):
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_all(path)
    except BlueprintError as exc:
        assert exc.problems
        for p in exc.problems:
            assert p.line is not None and p.line >= 1, str(p)
            assert str(p).startswith(f"{path}:{p.line}:{p.col}: ")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=mutated())
def test_mutations_through_the_cli_exit_0_or_2(tmp_path, text):
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code in (0, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
