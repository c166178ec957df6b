"""`json.dumps(value, indent=2)`, the same text at twice the speed, for a command's large
document (`rackform plan --json` of 4,096 nodes: 2 million values).

The standard library writes indented JSON in pure Python (its C writer cannot indent before
Python 3.14); this writer does the same with fewer calls per value. It takes what a command's
document holds (dicts with string keys, lists and tuples, strings, ints, floats, booleans,
None) and hands anything else to `json.dumps` itself, so the text is the standard library's
whatever it is given.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any

_CONSTANTS = {float("inf"): "Infinity", float("-inf"): "-Infinity"}


class _Other(Exception):
    """A value this writer leaves to the standard library."""


def _number(value: float) -> str:
    if value != value:
        return "NaN"
    return _CONSTANTS.get(value) or float.__repr__(value)


def _write(value: Any, indent: str, out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(encode_basestring_ascii(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is float:
        out.append(_number(value))
    elif kind is dict:
        if not value:
            out.append("{}")
            return
        inner = indent + "  "
        sep = "{\n" + inner
        for key, item in value.items():
            if type(key) is not str:
                raise _Other
            out.append(sep + encode_basestring_ascii(key) + ": ")
            _write(item, inner, out)
            sep = ",\n" + inner
        out.append("\n" + indent + "}")
    elif kind is list or kind is tuple:
        if not value:
            out.append("[]")
            return
        inner = indent + "  "
        sep = "[\n" + inner
        for item in value:
            out.append(sep)
            _write(item, inner, out)
            sep = ",\n" + inner
        out.append("\n" + indent + "]")
    else:
        raise _Other


def dumps(value: Any) -> str:
    """`json.dumps(value, indent=2)`."""
    out: list[str] = []
    try:
        _write(value, "", out)
    except _Other:
        return json.dumps(value, indent=2)
    return "".join(out)
