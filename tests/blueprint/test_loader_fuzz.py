"""Property: any mutation of a valid blueprint (delete, rename, retype, duplicate, nest keys),
any value nested however deep (around yamlmap's limit and far past it), and any number of hosts
(up to past a node group's 4,096) either loads or fails with exit 2 and located messages, never a
traceback."""

from __future__ import annotations

import copy

import yaml
from blueprint_helpers import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackform.blueprint.loader import load_all
from rackform.blueprint.problems import BlueprintError
from rackform.blueprint.yamlmap import MAX_DEPTH
from rackform.cli.main import app

BASES = [yaml.safe_load(p.read_text()) for p in EXAMPLES]
BARE_METAL = next(b for b in BASES if b["target"]["type"] == "bare_metal")
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


def _nested(kinds: list[str], leaf: str, flow: bool, indent: int) -> str:
    """Collections inside each other (m: mapping, s: list), as the value of a key at `indent`.
    Flow style on one line; block style one level per line (kept shallow: its text grows as
    the square of the depth) or, for lists only, `- - - 1` on one line."""
    if flow:
        opens = "".join("{k: " if k == "m" else "[" for k in kinds)
        closes = "".join("}" if k == "m" else "]" for k in reversed(kinds))
        return f" {opens}{leaf}{closes}\n"
    if all(k == "s" for k in kinds):
        return "\n" + " " * (indent + 2) + "- " * len(kinds) + leaf + "\n"
    lines = [" " * (indent + 2 + 2 * i) + ("k:" if k == "m" else "-") for i, k in enumerate(kinds)]
    return "\n" + "\n".join(lines) + "\n" + " " * (indent + 2 + 2 * len(kinds)) + leaf + "\n"


@st.composite
def deeply_nested(draw):
    """A valid blueprint with one top-level value replaced by collections nested around the
    limit (a level either side of it), well past it, or 100,000 deep."""
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    key = draw(st.sampled_from(sorted(doc)))
    del doc[key]
    depth = draw(
        st.one_of(
            st.integers(MAX_DEPTH - 3, MAX_DEPTH + 1),  # the top mapping is one level
            st.integers(1, 3 * MAX_DEPTH),
            st.just(100_000),
        )
    )
    flow = depth > 300 or draw(st.booleans())
    kinds = draw(st.sampled_from(["s", "m", "sm", "ms", "ssm"]))
    kinds = list((kinds * depth)[:depth])
    if depth > 300 and not flow:
        kinds = ["s"] * depth
    leaf = draw(st.sampled_from(["1", "x", "[]", "{}", "null"]))
    unclosed = draw(st.booleans()) and flow
    value = _nested(kinds, leaf, flow, 0)
    if unclosed:
        value = value.rstrip("]}\n") + "\n"
    return yaml.safe_dump(doc, sort_keys=False) + f"{key}:{value}"


@st.composite
def many_hosts(draw):
    """The bare-metal example with 1 to 5,000 hosts (a node group counts at most 4,096),
    sometimes one duplicated or with a bad address, sometimes with `count` set."""
    doc = copy.deepcopy(BARE_METAL)
    n = draw(st.one_of(st.integers(1, 64), st.sampled_from([1000, 4096, 4097, 5000])))
    doc["target"]["private_cidr"] = "10.0.0.0/8"
    hosts = [
        {"name": f"hgx-{i:02d}", "address": f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"}
        for i in range(1, n + 1)
    ]
    flaw = draw(st.sampled_from(["none", "duplicate", "address", "count"]))
    if flaw == "duplicate":
        hosts.append(dict(hosts[draw(st.integers(0, n - 1))]))
    elif flaw == "address":
        hosts[draw(st.integers(0, n - 1))]["address"] = "10.0.0.300"
    elif flaw == "count":
        doc["node_groups"][0]["count"] = draw(st.sampled_from([n, n + 1, 4096]))
    doc["node_groups"][0]["hosts"] = hosts
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)


def _cli_exit_0_or_2(path, text):
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code in (0, 2), result.output[-3000:]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    if result.exit_code == 2:
        assert any(line.startswith(f"{path}:") for line in result.output.splitlines())
    return result


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=deeply_nested())
def test_deep_nesting_through_the_cli_exits_0_or_2(tmp_path, text):
    result = _cli_exit_0_or_2(tmp_path / "deep.yaml", text)
    assert "RecursionError" not in result.output


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=many_hosts())
def test_many_hosts_through_the_cli_exit_0_or_2(tmp_path, text):
    _cli_exit_0_or_2(tmp_path / "hosts.yaml", text)


@st.composite
def env_named_items(draw):
    """The bare-metal example with an environment that removes or overrides a host by name:
    a name that exists, a typo of one, or one that does not exist at all."""
    doc = copy.deepcopy(BARE_METAL)
    hosts = [h["name"] for h in doc["node_groups"][0]["hosts"]]
    suffix = draw(st.sampled_from(["0", "x", "-1"]))
    name = draw(
        st.one_of(
            st.sampled_from(hosts),
            st.sampled_from([h + suffix for h in hosts]),
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8),
        )
    )
    remove = draw(st.booleans())
    item = {"name": name, "remove": True} if remove else {"name": name}
    group = doc["node_groups"][0]["name"]
    doc["environments"] = {"staging": {"node_groups": [{"name": group, "hosts": [item]}]}}
    return yaml.safe_dump(doc, sort_keys=False), name in hosts, remove


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=env_named_items())
def test_typod_removals_and_overrides_never_pass_silently(tmp_path, case):
    text, exists, remove = case
    result = _cli_exit_0_or_2(tmp_path / "env.yaml", text)
    if remove and not exists:
        # Removing a host the base lacks is a located error, never a silent no-op.
        assert result.exit_code == 2 and "to remove" in result.output
    if not remove and not exists:
        # A new name with nothing but a name is no host: an error that says so.
        assert result.exit_code == 2 and "is not in the base" in result.output
