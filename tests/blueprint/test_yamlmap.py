"""yamlmap's limits: any input is parsed or refused with a located problem that says which limit
it reached and where, never an internal error (a RecursionError in PyYAML's composer or in our
build, as 100,000 nested brackets used to give)."""

from __future__ import annotations

import itertools
import sys

import pytest
from typer.testing import CliRunner

from rackform.blueprint import yamlmap
from rackform.blueprint.yamlmap import MAX_DEPTH, MAX_VALUES, Loc, YamlProblems, parse
from rackform.cli.main import app


def problem(text: str) -> yamlmap.YamlProblem:
    with pytest.raises(YamlProblems) as exc:
        parse(text)
    (p,) = exc.value.problems
    return p


def flow_list(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def block(kinds: str, indent: int = 2) -> str:
    """Block collections inside each other, one per letter of `kinds` (m: mapping, s: list),
    each line indented 2 more than the one before (the text grows as the square of the depth)."""
    lines = []
    for i, kind in enumerate(kinds):
        lines.append(" " * (indent + 2 * i) + ("k:" if kind == "m" else "-"))
    lines.append(" " * (indent + 2 * len(kinds)) + "1")
    return "\n".join(lines) + "\n"


# The top-level mapping is the first level: `x: <value>` leaves MAX_DEPTH - 1 for the value.


def test_nesting_up_to_the_limit_parses():
    doc = parse("x: " + flow_list(MAX_DEPTH - 1) + "\n")
    value, depth = doc.data["x"], 1
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    assert (value, depth) == (1, MAX_DEPTH)
    assert parse("x:\n" + block("ms" * ((MAX_DEPTH - 1) // 2))).data["x"]


def test_one_level_more_is_located_where_it_starts():
    p = problem("x: " + flow_list(MAX_DEPTH) + "\n")
    # "x: " is 3 columns; the bracket opening level MAX_DEPTH + 1 is the MAX_DEPTH-th one.
    assert p.loc == Loc(1, 3 + MAX_DEPTH)
    assert p.message == f"lists and mappings nested more than {MAX_DEPTH} deep"
    assert "alias" not in p.message


@pytest.mark.parametrize(
    "text",
    [
        "x: " + flow_list(100_000) + "\n",
        "x: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n",
        "x: " + "[" * 100_000 + "\n",  # never closed
        "x:\n" + "- " * 100_000 + "1\n",
        "x:\n" + block("m" * 2_000),
        "x:\n" + block("sm" * 1_000),
    ],
    ids=["flow-lists", "flow-mappings", "unclosed", "block-lists", "block-mappings", "mixed"],
)
def test_100000_levels_are_a_located_problem(text):
    p = problem(text)
    assert p.message.startswith(f"lists and mappings nested more than {MAX_DEPTH} deep")
    assert p.loc.line <= MAX_DEPTH + 2  # where the limit is crossed, not the end of the input


def test_the_composer_stays_far_from_the_recursion_limit():
    """At the limit, parsing needs a few hundred frames at most, whatever the input's depth."""
    text = "x: " + flow_list(100_000) + "\n"
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 400)
    try:
        with pytest.raises(YamlProblems):
            parse(text)
        parse("x: " + flow_list(MAX_DEPTH - 1) + "\n")
    finally:
        sys.setrecursionlimit(before)


def test_aliases_nesting_deeper_than_the_limit_are_located_at_the_alias():
    # Each anchor is shallow in the text; expanded, a_k is k + 2 levels deep.
    lines = ["a0: &a0 [1]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 2 * MAX_DEPTH)]
    p = problem("\n".join(lines) + "\n")
    assert (
        p.message
        == f"lists and mappings nested more than {MAX_DEPTH} deep through the alias used here"
    )
    # The first value too deep is a_(MAX_DEPTH - 1); its alias of a_(MAX_DEPTH - 2) is on its line.
    k = MAX_DEPTH - 1
    assert p.loc == Loc(k + 1, lines[k].index("*") + 1)


def test_a_cycle_is_located_at_the_alias():
    p = problem("a: &x [1, *x]\n")
    assert p.message == "an alias refers to a value that contains it"
    assert p.loc == Loc(1, 11)


def test_a_large_document_without_aliases_says_how_many_values(monkeypatch):
    monkeypatch.setattr(yamlmap, "MAX_VALUES", 50)
    hosts = "".join(f"  - {{name: h{i}, address: 10.0.0.{i}}}\n" for i in range(30))
    p = problem("hosts:\n" + hosts)
    # 1 document + 1 list + 30 hosts x (mapping, name, address)
    assert p.message == (
        "the document has 92 values, more than the 50 a blueprint may have; the limit is "
        "reached here"
    )
    assert "alias" not in p.message + p.fix
    assert p.loc.line == 18  # the 51st value: host 16's name (host 0 is on line 2)


def test_aliases_that_do_not_reach_the_limit_are_not_blamed(monkeypatch):
    monkeypatch.setattr(yamlmap, "MAX_VALUES", 50)
    p = problem("a: &a [1, 2]\nb: *a\nc: [" + ", ".join(["3"] * 60) + "]\n")
    assert p.message.startswith("the document has 68 values, more than the 50")
    assert "alias" not in p.message + p.fix


def test_an_alias_bomb_is_named_and_counted_at_the_alias():
    names = "abcdefghi"
    lines = ["a: &a [" + ", ".join(["x"] * 10) + "]"]
    for prev, cur in itertools.pairwise(names):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    p = problem("\n".join(lines) + "\n")
    total = 1 + sum(sum(10**j for j in range(k + 1)) for k in range(1, 10))
    assert p.message == (
        f"through its aliases the document expands to {total:,} values, more than the "
        f"{MAX_VALUES:,} a blueprint may have (an alias bomb?); the limit is reached expanding "
        "the alias used here"
    )
    # e (10**5 values) is where the count passes the limit, expanding one of its aliases of d.
    assert p.loc.line == 5 and lines[4][p.loc.col - 1 : p.loc.col + 1] == "*d"


def test_expanded_size_counts_each_shared_node_once_and_sees_cycles():
    import yaml

    node = yaml.compose("a: &a [1, 2]\nb: [*a, *a]\n")
    assert yamlmap.expanded_size(node) == 1 + 3 + 1 + 2 * 3
    assert yamlmap.expanded_size(yaml.compose("a: &x [1, *x]\n")) is None


def test_the_full_size_values_limit():
    p = problem("x: [" + "1, " * MAX_VALUES + "]\n")
    assert p.message.startswith(f"the document has {MAX_VALUES + 2:,} values, more than the")


@pytest.mark.parametrize(
    "text,message",
    [
        ("name: x\nnode_groups: " + flow_list(100_000) + "\n", "nested more than"),
        ("name: x\nhosts:\n" + "- " * 100_000 + "1\n", "nested more than"),
    ],
    ids=["flow", "block"],
)
def test_the_cli_reports_it_located_with_exit_2(tmp_path, text, message):
    path = tmp_path / "deep.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith(str(path))]
    assert line.startswith(f"{path}:") and message in line
    line_no, col = line[len(str(path)) + 1 :].split(":")[:2]
    assert int(line_no) >= 2 and int(col) >= 1


# libyaml's scanner and parser under the same composer (yamlmap._FAST), against the pure-Python
# ones: the same values at the same lines and columns, and the same refusals in the same words.
AGREEING = [
    "name: a\nnode_groups:\n  - {name: g, hosts: [{name: h1, address: 10.0.0.1}]}\n",
    "a: &x {k: [1, 2.5, true, null, ~, 0x1f, '3']}\nb: *x\nc: [*x, *x]\n",
    '# comment\nkey: "é ü" # trailing\nnext: {é: 1, b: 2}\nlast: ünïcode\n',
    "text: |\n  two\n  lines\nfolded: >\n  one\n  line\nempty:\n",
    "- 1\n- - 2\n  - {a: [3]}\n",
    "",
    "a: 1\na: 2\n",  # duplicate key
    "a: [1, 2\nb: 3\n",  # unclosed
    "a:\n\t- 1\n",  # a tab
    "a: 1\n---\nb: 2\n",  # two documents
    "? [1, 2]\n: v\n",  # a key that is no plain value
    "a: *nowhere\n",  # an undefined alias
    "a: b: c\n",
    "a: 'unclosed\n",
    "x: " + flow_list(MAX_DEPTH) + "\n",
    "a: \x07\n",  # a control character
]


def _outcome(text: str):
    try:
        doc = parse(text)
    except YamlProblems as exc:
        return [(p.loc, p.message, p.fix) for p in exc.problems]
    return doc.data, doc.keys, doc.values


@pytest.mark.skipif(yamlmap._FAST is None, reason="PyYAML built without libyaml")
@pytest.mark.parametrize("text", AGREEING)
def test_libyaml_and_the_pure_python_parser_agree(text, monkeypatch):
    fast = _outcome(text)
    monkeypatch.setattr(yamlmap, "_FAST", None)
    assert fast == _outcome(text)


@pytest.mark.skipif(yamlmap._FAST is None, reason="PyYAML built without libyaml")
def test_libyaml_reads_the_document_and_the_limits_hold_there(monkeypatch):
    used = []
    real = yamlmap._compose_with
    monkeypatch.setattr(yamlmap, "_compose_with", lambda c, t: used.append(c) or real(c, t))
    assert parse("a: [1, {b: 2}]\n").data == {"a": [1, {"b": 2}]}
    assert used == [yamlmap._FAST]
    used.clear()
    with pytest.raises(YamlProblems):
        yamlmap._compose_with(yamlmap._FAST, "x: " + flow_list(MAX_DEPTH) + "\n")
