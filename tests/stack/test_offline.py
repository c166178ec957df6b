"""The offline recorder's own rules: a deterministic tree order whatever order registrations
arrive in, and inputs made plain (unknowns named, wire doubles back to integers)."""

from __future__ import annotations

import random

import pytest
from pulumi.output import Unknown

from rackform.stack.offline import KNOWN_AFTER_UP, Record, plain, tree_order


def rec(name, parent=None, deps=(), custom=True, type_="t:m:R"):
    urn = f"urn:pulumi:s::p::{type_}::{name}"
    parent_urn = f"urn:pulumi:s::p::t:m:C::{parent}" if parent else None
    return Record(
        type=type_,
        name=name,
        parent=parent,
        urn=urn,
        parent_urn=parent_urn,
        custom=custom,
        protect=False,
        ignore_changes=[],
        dependencies=[],
        dependency_urns=frozenset(f"urn:pulumi:s::p::t:m:R::{d}" for d in deps),
    )


def test_tree_order_is_the_same_whatever_the_arrival_order():
    records = [
        rec("root", custom=False, type_="t:m:C"),
        rec("vpc", "root"),
        rec("subnet", "root", deps=["vpc"]),
        rec("node-10", "root", deps=["subnet"]),
        rec("node-2", "root", deps=["subnet"]),
        rec("configure", "root", deps=["node-2", "node-10"]),
    ]
    expected = ["root", "vpc", "subnet", "node-2", "node-10", "configure"]
    rng = random.Random(7)
    for _ in range(20):
        shuffled = records[:]
        rng.shuffle(shuffled)
        assert [r.name for r in tree_order(shuffled)] == expected


def test_a_dependency_cycle_is_reported():
    records = [rec("a", deps=["b"]), rec("b", deps=["a"])]
    with pytest.raises(RuntimeError, match="cycle among a, b"):
        tree_order(records)


def test_plain_values():
    assert plain({"b": 2.0, "a": [Unknown(), 1.5]}) == {"a": [KNOWN_AFTER_UP, 1.5], "b": 2}
    assert list(plain({"z": 1, "a": 2})) == ["a", "z"]
