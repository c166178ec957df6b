"""Combining Pulumi outputs that hold plain data (scalars, lists and dicts of them) the way
`Output.all(...).apply(fn)` does, without its deep copy.

`Output.all` hands every output's value back to `Output.from_input`, which makes a new output of
every list and dict inside it. Combining a cluster's node list or its inventory that way costs
tens of outputs (and their asyncio tasks) per node, each time: at 4,096 nodes that was most of
what an offline plan spent above the Pulumi SDK's own cost of registering the resources
(docs/operations/scale.md). `applied` gives the same value, dependencies, known-ness and
secrecy with a few outputs per combined value, whatever it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi


class _Held:
    """A value `Output.from_input` leaves whole: it is no list or dict."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


def applied(fn: Callable[..., Any], *values: Any) -> pulumi.Output:
    """`fn` of the values of `values` (outputs or plain values, none of them holding an output
    inside a list or dict), as an output: what `Output.all(*values).apply(lambda v: fn(*v))`
    gives for such values, through the same Output.all (unknown where any output is unknown,
    and `fn` does not run; secret where any is secret; depending on every output's
    resources), with each value held whole on its way through."""
    at = [i for i, v in enumerate(values) if isinstance(v, pulumi.Output)]
    held = pulumi.Output.all(*[values[i].apply(_Held) for i in at])

    def call(got: list[_Held]) -> Any:
        args = list(values)
        for i, h in zip(at, got, strict=True):
            args[i] = h.value
        return fn(*args)

    return held.apply(call)


PIECE = 256  # outputs gathered by one Output.all inside `gathered`


def gathered(outputs: list[pulumi.Output]) -> pulumi.Output:
    """`Output.all(*outputs)` for many outputs (each node's own), as a list: the same value,
    dependencies, known-ness and secrecy. Output.all unites its outputs' resources one output
    at a time, copying the union so far each time (quadratic: 8,192 outputs of 4,096 nodes,
    16 million copies); here in pieces of PIECE, whose lists `applied` joins."""
    if len(outputs) <= PIECE:
        return pulumi.Output.all(*outputs)
    pieces = [pulumi.Output.all(*outputs[i : i + PIECE]) for i in range(0, len(outputs), PIECE)]
    return applied(lambda *lists: [x for got in lists for x in got], *pieces)
