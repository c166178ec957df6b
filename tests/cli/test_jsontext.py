"""rackform/cli/jsontext.dumps writes exactly what json.dumps(value, indent=2) writes: for any
value a command's document can hold, odd strings, floats and empty containers included, and
for what it leaves to the standard library (keys that are not strings, other types)."""

from __future__ import annotations

import enum
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackform.cli.jsontext import dumps

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=40,
)


@settings(max_examples=400)
@given(VALUES)
def test_the_same_text_as_the_standard_library(value):
    assert dumps(value) == json.dumps(value, indent=2)


class Colour(enum.Enum):
    RED = 1


class Label(str):
    pass


def test_what_it_leaves_to_the_standard_library_is_written_alike():
    for value in (
        {1: "int key", None: "none key", 2.5: "float key", False: "bool key"},
        [Label("a str subclass"), {"nested": {3: [1, 2]}}],
        {"e": [1e300, -0.0, 5e-324, math.pi, float("nan"), float("-inf")]},
        {'ünïcode \u2028 \x00 "quoted"': ["\ud83d\ude00", "\\"]},
        {},
        [],
        [[], {}, [[]], {"a": {}}],
    ):
        assert dumps(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("value", [{"a": Colour.RED}, [object()]], ids=["enum", "object"])
def test_a_type_json_refuses_is_refused_alike(value):
    with pytest.raises(TypeError) as expected:
        json.dumps(value, indent=2)
    with pytest.raises(TypeError) as got:
        dumps(value)
    assert str(got.value) == str(expected.value)
