"""The floor of an offline plan: a bare Pulumi program that registers exactly the resources a
plan recorded (their types, names, parents, inputs as plain values, dependencies and options)
under the same recording mocks (`rackform.stack.offline.record_program`), and nothing else:
no blueprint, no compile, no rackform component, no output chains, no rendering.

    python benchmarks/plan_floor.py record BLUEPRINT RECORDS.json [ENV]   (what the plan registers)
    python benchmarks/plan_floor.py run RECORDS.json                (the floor, timed)

`run` prints one JSON line of CPU seconds
(user+sys) measured in this process at each stage: `start` (the interpreter and site, before
the first line), `sdk_imports` (pulumi and the provider SDK modules the recorded types come
from), `recorder_import` (rackform's recorder module: rackform's, not the floor's), `register`
(the registrations under the mocks), `recorder_own` (the part of `register` that is the
recorder's own code, rackform's), and `differs` (resources registered otherwise than the plan
did: none, or the floor is no floor). What `rackform plan` spends above these is rackform's
(benchmarks/plan_bench.py subtracts). Custom resources are registered with the class the
program registers them with (the provider SDK's own; a training node's instance as
NodeInstance, the provider's resource with the one output read; generic where neither), dynamic
ones through `pulumi.dynamic.Resource` with a provider of the same kind (so the SDK pickles a
provider per resource as it does for rackform's), components as `ComponentResource`s: the SDK's
work per resource, and nothing of rackform's programs above it.
"""

from __future__ import annotations

import resource
import sys


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


STARTED = _cpu()  # before anything this script imports

import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

DYNAMIC = "pulumi-python:dynamic/"


def write_records(blueprint: Path, path: Path, env: str | None = None) -> None:
    """What `rackform plan BLUEPRINT [--env ENV]` registers (the recorder's records, in tree
    order), as the floor program reads them."""
    from rackform.engine import prepare
    from rackform.stack.offline import record

    records = record(prepare(blueprint, env).plan)
    path.write_text(
        json.dumps(
            [
                {
                    "type": r.type,
                    "name": r.name,
                    "urn": r.urn,
                    "parent_urn": r.parent_urn,
                    "custom": r.custom,
                    "protect": r.protect,
                    "dependency_urns": sorted(r.dependency_urns),
                    "inputs": r.inputs,
                    "ignore_changes": r.ignore_changes,
                    "replace_on_changes": r.replace_on_changes,
                    "delete_before_replace": r.delete_before_replace,
                    "retain_on_delete": r.retain_on_delete,
                }
                for r in records
            ]
        ),
        encoding="utf-8",
    )


def provider_modules(types: set[str]) -> list[str]:
    """The provider SDK modules the recorded types come from: `aws:ec2/instance:Instance` is
    pulumi_aws.ec2 (what the real program imports to make it). Component types (rackform's
    own) name no installed provider SDK."""
    out = set()
    for t in types:
        package, _, rest = t.partition(":")
        if importlib.util.find_spec(f"pulumi_{package}") is None:
            continue
        module = rest.split("/", 1)[0].split(":", 1)[0]
        out.add(f"pulumi_{package}" + (f".{module}" if module and module != "index" else ""))
    return sorted(out)


def ordered(records: list[dict]) -> list[dict]:
    """Each record after its parent and the resources it depends on (the recorder's tree order
    almost always is; this makes sure)."""
    urns = {r["urn"] for r in records}
    done: set[str] = set()
    out: list[dict] = []
    waiting = list(records)
    while waiting:
        later = []
        for r in waiting:
            needs = {r["parent_urn"], *r["dependency_urns"]} & urns
            (out if needs <= done else later).append(r)
            if needs <= done:
                done.add(r["urn"])
        if len(later) == len(waiting):
            raise SystemExit("the records' dependencies form a cycle")
        waiting = later
    return out


def program(records: list[dict]) -> None:
    """Register every record, as the recorder saw it."""
    import pulumi
    import pulumi.dynamic
    from plan_floor import FloorProvider  # by reference, as dill pickles rackform's providers

    from rackform.targets.onprem.cluster import sdk_pickler_kept

    made: dict[str, pulumi.Resource] = {}
    kinds: dict[str, type] = {}
    provider = FloorProvider()
    for r in ordered(records):
        opts = pulumi.ResourceOptions(
            parent=made.get(r["parent_urn"] or ""),
            depends_on=[made[u] for u in r["dependency_urns"] if u in made],
            protect=r["protect"],
            ignore_changes=r["ignore_changes"] or None,
            replace_on_changes=r["replace_on_changes"] or None,
            delete_before_replace=r["delete_before_replace"],
            retain_on_delete=r["retain_on_delete"],
        )
        inputs: dict[str, Any] = dict(r["inputs"])
        if r["type"].startswith(DYNAMIC):
            kind = kinds.get(r["type"])
            if kind is None:
                module, _, name = r["type"][len(DYNAMIC) :].rpartition(":")
                kind = kinds[r["type"]] = type(
                    name, (pulumi.dynamic.Resource,), {}, module=module, name=name
                )
            with sdk_pickler_kept():  # as rackform's hosts do (else RecursionError at ~1,000)
                made[r["urn"]] = kind(provider, r["name"], inputs, opts)
        elif r["custom"]:
            made[r["urn"]] = custom(r["type"], r["name"], inputs, opts)
        else:
            component = pulumi.ComponentResource(r["type"], r["name"], inputs, opts)
            component.register_outputs({})
            made[r["urn"]] = component


def provider_class(token: str) -> tuple[type, dict[str, str]] | None:
    """The provider SDK's class for `token` (`aws:ec2/instance:Instance`: pulumi_aws.ec2's
    Instance) and its inputs' Python names by wire name, or None (not a provider SDK's)."""
    package, _, rest = token.partition(":")
    path, _, name = rest.rpartition(":")
    module = path.split("/", 1)[0]
    try:
        found = importlib.import_module(
            f"pulumi_{package}" + (f".{module}" if module and module != "index" else "")
        )
    except ImportError:
        return None
    cls, args = getattr(found, name, None), getattr(found, f"{name}Args", None)
    if cls is None or args is None:
        return None
    from pulumi import _types

    return cls, {wire: py for py, wire in _types.input_type_py_to_pulumi_names(args).items()}


_CLASSES: dict[str, tuple[type, dict[str, str]] | None] = {}


def custom(token: str, name: str, inputs: dict[str, Any], opts):
    """A custom resource of the class the program registers it with: a training node's
    instance as rackform's NodeInstance (the provider's resource with the one output read; its
    whole registration is the SDK's), anything else of the provider SDK's own class where there
    is one (its output properties, its argument types: what the real program's resource costs),
    else generic."""
    import pulumi

    from rackform.targets.aws import node_instance

    if token == node_instance.TYPE and set(inputs) == {"launchTemplate", "tags"}:
        return node_instance.NodeInstance(
            name, launch_template=inputs["launchTemplate"], tags=inputs["tags"], opts=opts
        )
    if token not in _CLASSES:
        _CLASSES[token] = provider_class(token)
    found = _CLASSES[token]
    if found is None:
        return pulumi.CustomResource(token, name, inputs, opts)
    cls, py_names = found
    unknown = set(inputs) - set(py_names)
    if unknown:
        raise SystemExit(f"{token} has no input named {', '.join(sorted(unknown))}")
    return cls(name, opts=opts, **{py_names[k]: v for k, v in inputs.items()})


class FloorProvider:
    """Stands in for rackform's dynamic providers: pickled once per resource, never called."""

    serialize_as_secret_always = False


def run(records_file: Path) -> None:
    records = json.loads(records_file.read_text(encoding="utf-8"))
    marks = {"start": STARTED}
    before = _cpu()
    importlib.import_module("pulumi")
    importlib.import_module("pulumi.runtime")
    importlib.import_module("pulumi.dynamic")
    for module in provider_modules({r["type"] for r in records}):
        importlib.import_module(module)
    marks["sdk_imports"] = _cpu() - before
    before = _cpu()
    from rackform.stack.offline import record_program

    marks["recorder_import"] = _cpu() - before
    before = _cpu()
    stack = records[0]["urn"].split("::")[0].split(":")[-1] if records else "floor"
    done = record_program(lambda: program(records), stack, exiting=True)
    marks["register"] = _cpu() - before
    marks["recorder_own"] = recorder_own(done)
    print(json.dumps({**marks, "differs": differs(records, done)}))


def recorder_own(done: list) -> float:
    """CPU seconds of what the recorder itself does after the run (rackform's code: putting
    the records in tree order, making their inputs plain), measured again on the same records:
    counted in `register`, but rackform's, not the floor's."""
    from rackform.stack import offline

    before = _cpu()
    offline.tree_order(list(done))
    for r in done:
        {k: offline.plain(v) for k, v in sorted(r.inputs.items())}
    return _cpu() - before


def differs(records: list[dict], done: list) -> list[str]:
    """The resources the floor registered otherwise than the plan did (another type, name,
    parent, input or dependency; or one missing): the floor is only a floor if this is empty."""

    def key(r: dict) -> tuple:
        return (r["type"], r["name"], r["parent_urn"], r["dependency_urns"])

    want = {r["urn"]: (key(r), r["inputs"]) for r in records}
    got = {
        r.urn: (
            (r.type, r.name, r.parent_urn, sorted(r.dependency_urns)),
            json.loads(json.dumps(r.inputs)),
        )
        for r in done
    }
    return sorted(
        urn.rsplit("::", 1)[-1] for urn in want.keys() | got.keys() if want.get(urn) != got.get(urn)
    )


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if sys.argv[1:2] == ["record"] and len(sys.argv) in (4, 5):
        write_records(Path(sys.argv[2]), Path(sys.argv[3]), *sys.argv[4:])
    elif sys.argv[1:2] == ["run"] and len(sys.argv) == 3:
        run(Path(sys.argv[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
