"""`applied` (rackform/stack/outputs.py) against `Output.all(...).apply(fn)`, its model: the same
value, the same dependencies (an unknown output must not lose the others' resources), the same
secrecy, `fn` not run while any value is unknown, and the values reaching `fn` whole, never
copied list by list. Run under the offline recorder: Pulumi's mock runtime stands in for the
engine, which this machine cannot reach."""

from __future__ import annotations

import asyncio

import pulumi
import pytest

from rackform.stack.offline import KNOWN_AFTER_UP, record_program
from rackform.stack.outputs import PIECE, applied, gathered

THING = "test:index:Thing"
NESTED = [1, {"k": [2, 3]}, ["x"]]


def unknown(*depends_on: pulumi.Resource) -> pulumi.Output:
    """An output a preview cannot know (as a resource's computed output is), depending on
    `depends_on`."""
    loop = asyncio.get_event_loop()
    futures = [loop.create_future() for _ in range(3)]
    for f, value in zip(futures, (set(depends_on), None, False), strict=True):
        f.set_result(value)
    return pulumi.Output(futures[0], futures[1], futures[2])


def run(program) -> tuple[dict, dict]:
    seen: dict = {}
    records = record_program(lambda: program(seen), "outputs-test")
    return {r.name: r for r in records}, seen


def sink(name: str, value) -> None:
    pulumi.CustomResource(THING, name, {"value": value})


def both(fn, *values) -> None:
    """The same combination through Output.all and through applied, into two resources."""
    sink("via-all", pulumi.Output.all(*values).apply(lambda got: fn(*got)))
    sink("via-applied", applied(fn, *values))


def test_known_outputs_give_output_all_s_value_and_dependencies():
    calls = []

    def program(seen):
        a = pulumi.CustomResource(THING, "a", {"v": NESTED})
        b = pulumi.CustomResource(THING, "b", {"v": "plain"})
        seen["a"] = a

        def fn(x, y, z):
            calls.append((x, y, z))
            return {"x": x, "y": y, "z": z}

        both(fn, a.v, b.v, {"given": [1, 2]})

    recs, _ = run(program)
    via_all, via_applied = recs["via-all"], recs["via-applied"]
    assert via_applied.inputs == via_all.inputs
    assert via_applied.inputs["value"] == {"x": NESTED, "y": "plain", "z": {"given": [1, 2]}}
    assert via_applied.dependencies == via_all.dependencies == ["a", "b"]
    assert len(calls) == 2


def test_an_unknown_output_keeps_every_dependency_and_fn_does_not_run():
    calls = []

    def program(seen):
        a = pulumi.CustomResource(THING, "a", {"v": NESTED})
        b = pulumi.CustomResource(THING, "b", {"v": "plain"})
        c = pulumi.CustomResource(THING, "c", {"v": 3})

        def fn(*got):
            calls.append(got)
            return got

        # The unknown one first: later outputs' resources must still be depended on.
        both(fn, unknown(a), b.v, c.v)

    recs, _ = run(program)
    for name in ("via-all", "via-applied"):
        assert recs[name].inputs == {"value": KNOWN_AFTER_UP}
        assert recs[name].dependencies == ["a", "b", "c"]
    assert calls == []


def test_a_secret_stays_secret():
    def program(seen):
        a = pulumi.CustomResource(THING, "a", {"v": NESTED})
        out = applied(lambda x, y: [x, y], a.v, pulumi.Output.secret("s3cret"))
        pulumi.Output.from_input(out.is_secret()).apply(lambda s: seen.update(secret=s))
        plain = applied(lambda x: x, a.v)
        pulumi.Output.from_input(plain.is_secret()).apply(lambda s: seen.update(plain=s))

    _, seen = run(program)
    assert seen == {"secret": True, "plain": False}


def test_the_values_reach_fn_whole_where_output_all_copies_them():
    def program(seen):
        held = {"big": [[1, 2], [3, 4]]}
        out = pulumi.Output.from_input(0).apply(lambda _: held)  # an output holding `held`
        seen["held"] = held
        applied(lambda got: seen.update(applied=got), out)
        pulumi.Output.all(out).apply(lambda got: seen.update(all=got[0]))

    _, seen = run(program)
    assert seen["applied"] is seen["held"]  # no copy
    assert seen["all"] == seen["held"] and seen["all"] is not seen["held"]


def test_plain_values_only_still_give_an_output():
    def program(seen):
        sink("only-plain", applied(lambda x, y: x + y, 2, 3))

    recs, _ = run(program)
    assert recs["only-plain"].inputs == {"value": 5}


@pytest.mark.parametrize("count", [0, 1, 40])
def test_any_number_of_outputs(count):
    def program(seen):
        things = [pulumi.CustomResource(THING, f"t{i}", {"v": i}) for i in range(count)]
        sink("sum", applied(lambda *vs: sum(vs), *[t.v for t in things]))

    recs, _ = run(program)
    assert recs["sum"].inputs == {"value": sum(range(count))}
    assert recs["sum"].dependencies == sorted(f"t{i}" for i in range(count))


@pytest.mark.parametrize("count", [0, 1, PIECE, PIECE + 1, 2 * PIECE + 3])
def test_gathered_gives_output_all_s_list_and_dependencies(count):
    def program(seen):
        things = [pulumi.CustomResource(THING, f"t{i}", {"v": i}) for i in range(count)]
        outs = [out for t in things for out in (t.v, t.urn)]
        sink("via-all", pulumi.Output.all(*outs))
        sink("via-gathered", gathered(outs))

    recs, _ = run(program)
    assert recs["via-gathered"].inputs == recs["via-all"].inputs
    assert len(recs["via-gathered"].inputs.get("value") or []) == 2 * count
    assert recs["via-gathered"].dependencies == recs["via-all"].dependencies
    assert len(recs["via-gathered"].dependencies) == count


def test_gathered_is_unknown_where_one_piece_is():
    def program(seen):
        things = [pulumi.CustomResource(THING, f"t{i}", {"v": i}) for i in range(2 * PIECE)]
        outs = [t.v for t in things]
        outs[PIECE + 5] = unknown(things[PIECE + 5])
        sink("via-gathered", gathered(outs).apply(lambda got: seen.update(ran=True) or got))

    recs, seen = run(program)
    assert recs["via-gathered"].inputs == {"value": KNOWN_AFTER_UP}
    assert len(recs["via-gathered"].dependencies) == 2 * PIECE
    assert "ran" not in seen
