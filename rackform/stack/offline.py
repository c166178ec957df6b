"""Run the Pulumi program offline, in-process, under Pulumi's mock runtime, recording every
resource it registers: type, name, parent, dependencies and inputs.

This is the official unit-test path (`pulumi.runtime.set_mocks`): no engine, no plugins, no
credentials, no network. The mocks stand in for the cloud and the engine, which this path cannot
reach; they answer what a real engine would only know after `up` (ids, ARNs, addresses) with
placeholders (`<name>.id`) or as unknown, so the plan never pretends to know them.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import heapq
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pulumi.asset import FileAsset
from pulumi.output import Unknown
from pulumi.runtime import MockCallArgs, MockResourceArgs, Mocks, set_all_config, set_mocks
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.rpc import UNKNOWN
from pulumi.runtime.settings import SETTINGS, set_root_resource
from pulumi.runtime.stack import run_in_stack, run_pulumi_func

from rackform.plan.model import Plan, thaw
from rackform.plan.targets.offline import UNKNOWN as UNKNOWN_TO_TARGET
from rackform.plan.targets.offline import OfflineAnswers
from rackform.stack.target import StackTarget

PROJECT = "rackform"
PROVIDER_KEY = "__provider"  # a dynamic resource's pickled provider: not an input to show
KNOWN_AFTER_UP = "(known after up)"
# Attributes the engine would only know after creating the resource: shown as `<name>.<attr>`,
# a reference a reader can follow, rather than an invented value.
COMPUTED = ("arn", "name", "latestVersion")


@dataclass
class Record:
    type: str
    name: str
    parent: str | None
    urn: str
    parent_urn: str | None
    custom: bool
    protect: bool
    ignore_changes: list[str]
    dependencies: list[str]
    delete_before_replace: bool = False
    retain_on_delete: bool = False  # `destroy` leaves it (e.g. a shared file system's data)
    replace_on_changes: list[str] = field(default_factory=list)
    dependency_urns: frozenset[str] = frozenset()
    inputs: dict[str, Any] = field(default_factory=dict)
    import_id: str = ""  # the cloud id of an existing resource to import (Pulumi's `import`)
    aliases: tuple[str, ...] = ()  # URNs it was known by (Pulumi's `aliases`, as full URNs)

    @property
    def options(self) -> dict[str, Any]:
        """The options that decide how a change reaches it: which inputs are left as they are
        (ignore_changes), which always replace it (replace_on_changes), and whether a
        replacement deletes the old one first (delete_before_replace)."""
        return {
            "ignore_changes": self.ignore_changes,
            "replace_on_changes": self.replace_on_changes,
            "delete_before_replace": self.delete_before_replace,
        }


def urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def plain(value: Any) -> Any:
    """Inputs as JSON-able values, unknowns as KNOWN_AFTER_UP."""
    if isinstance(value, Unknown) or value == UNKNOWN:
        return KNOWN_AFTER_UP
    if isinstance(value, FileAsset):
        return {"file": str(value.path)}
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire carries every number as a double
    if isinstance(value, dict):
        # Sorted: protobuf Structs carry no key order, so the wire order varies run to run.
        return {k: plain(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _echo(value: Any) -> Any:
    """An input handed back as an output: unknowns stay unknown."""
    if isinstance(value, Unknown):
        return UNKNOWN
    if isinstance(value, dict):
        return {k: _echo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_echo(v) for v in value]
    return value


@functools.cache
def answers() -> OfflineAnswers:
    """What every target's provider computes, leaves unknown and answers to calls (each
    target's compiler says, `offline_answers`)."""
    from rackform.plan.targets.compilers import COMPILERS

    return OfflineAnswers.merged(c.offline_answers() for c in COMPILERS.values())


STACK_REFERENCE = "pulumi:pulumi:StackReference"
ORGANIZATION = "organization"  # what a self-managed backend calls every stack's organization


class RecordingMocks(Mocks):
    """Answers for the engine: every output is the input echoed back, plus placeholders and
    the targets' own answers. `references`: what each stack another stack reads through a
    StackReference exports (stack name -> outputs), as its own program registered them."""

    def __init__(self, references: dict[str, dict[str, Any]] | None = None) -> None:
        self.inputs: dict[tuple[str, str], dict[str, Any]] = {}
        self.references = references or {}
        a = answers()
        self.computed, self.unknown, self.calls = a.computed, a.unknown, a.calls

    def _reference(self, args: MockResourceArgs) -> tuple[str | None, dict]:
        stack = str(args.resource_id).rsplit("/", 1)[-1]
        if stack not in self.references:
            raise RuntimeError(f"the offline plan has no outputs of stack {stack} to read")
        return args.resource_id, {
            "name": args.resource_id,
            "outputs": self.references[stack],
            "secretOutputNames": [],
        }

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict]:
        if args.typ == STACK_REFERENCE:
            return self._reference(args)
        inputs = {k: v for k, v in args.inputs.items() if k != PROVIDER_KEY}
        self.inputs[(args.typ, args.name)] = inputs
        # A component has no state; a read (`Resource.get`, by id) is a custom resource that
        # exists already, which the mock monitor does not mark custom.
        if not args.custom and not args.resource_id:
            return None, {}
        state = {k: _echo(v) for k, v in inputs.items()}
        if args.typ.startswith("pulumi-python:dynamic"):
            # Outputs a dynamic provider computes (declared as None inputs): unknown until up.
            state = {k: (UNKNOWN if v is None else v) for k, v in state.items()}
        for attr in COMPUTED:
            state.setdefault(attr, f"<{args.name}>.{attr}")
        # What the target says the resource computes: a reference, even where a dynamic
        # provider declared it (as a None input) to receive it.
        for attr in self.computed.get(args.typ, ()):
            state[attr] = f"<{args.name}>.{attr}"
        for attr in self.unknown.get(args.typ, ()):
            state[attr] = UNKNOWN
        return f"<{args.name}>.id", state

    def call(self, args: MockCallArgs) -> tuple[dict, list | None]:
        answer = self.calls.get(args.token)
        if answer is None:
            raise NotImplementedError(f"the offline plan has no answer for {args.token}")
        got = answer(args.args)
        return {k: UNKNOWN if v is UNKNOWN_TO_TARGET else v for k, v in got.items()}, []


class RecordingMonitor(MockMonitor):
    """The mock monitor, also keeping each registration's parent and dependencies."""

    def __init__(self, mocks: RecordingMocks):
        super().__init__(mocks)
        self.records: list[Record] = []
        self.stack_outputs: dict[str, Any] = {}  # the exports, as the engine receives them

    def RegisterResourceOutputs(self, request):
        if request.urn.split("::")[2] == "pulumi:pulumi:Stack":
            from google.protobuf.json_format import MessageToDict

            self.stack_outputs = MessageToDict(request.outputs)
        return super().RegisterResourceOutputs(request)

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            parent_urn = request.parent or None
            if parent_urn is not None and parent_urn.split("::")[2] == "pulumi:pulumi:Stack":
                parent_urn = None  # the stack itself is not a resource a user declares
            self.records.append(
                Record(
                    type=request.type,
                    name=request.name,
                    parent=urn_name(parent_urn) if parent_urn else None,
                    urn=response.urn,
                    parent_urn=parent_urn,
                    custom=bool(request.custom),
                    protect=bool(request.protect),
                    ignore_changes=sorted(request.ignoreChanges),
                    dependencies=sorted({urn_name(u) for u in request.dependencies}),
                    dependency_urns=frozenset(request.dependencies),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    retain_on_delete=bool(request.retainOnDelete),
                    replace_on_changes=sorted(request.replaceOnChanges),
                    import_id=request.importId,
                    aliases=tuple(a.urn for a in request.aliases if a.urn),
                )
            )
        return response


_NUM = re.compile(r"(\d+)")


def natural(name: str) -> list:
    """gpu-2 before gpu-10."""
    return [int(p) if p.isdigit() else p for p in _NUM.split(name)]


def tree_order(records: list[Record]) -> list[Record]:
    """Registrations arrive from a thread pool in no fixed order. This order is deterministic:
    depth first; among siblings, what a sibling depends on comes first (a component depends on
    whatever its descendants depend on), ties broken by type and natural name."""
    children: dict[str | None, list[Record]] = {}
    for r in records:
        children.setdefault(r.parent_urn, []).append(r)
    needs: dict[str, set[str]] = {}

    def collect(r: Record) -> set[str]:
        deps = set(r.dependency_urns)
        for c in children.get(r.urn, []):
            deps |= collect(c)
        needs[r.urn] = deps
        return deps

    for r in children.get(None, []):
        collect(r)
    parent_of = {r.urn: r.parent_urn for r in records}

    def sibling_of(urn: str, parent: str | None) -> str | None:
        """The ancestor of `urn` (or itself) that is a child of `parent`."""
        while urn in parent_of and parent_of[urn] != parent:
            urn = parent_of[urn]  # parent chains end at a root: this stops
        return urn if urn in parent_of else None

    out: list[Record] = []

    def walk(parent: str | None) -> None:
        siblings = {r.urn: r for r in children.get(parent, [])}
        waiting = {u: {sibling_of(d, parent) for d in needs[u]} & siblings.keys() for u in siblings}
        for u, deps in waiting.items():
            deps.discard(u)  # (not `keys() - {u}`: a copy of every sibling for each sibling)
        dependents: dict[str, list[str]] = {}
        for u, deps in waiting.items():
            for d in deps:
                dependents.setdefault(d, []).append(u)
        key = {u: (r.type, natural(r.name), u) for u, r in siblings.items()}
        ready = [key[u] for u, deps in waiting.items() if not deps]
        heapq.heapify(ready)
        while ready:
            urn = heapq.heappop(ready)[2]
            out.append(siblings[urn])
            walk(urn)
            for u in dependents.get(urn, []):
                waiting[u].discard(urn)
                if not waiting[u]:
                    heapq.heappush(ready, key[u])
        stuck = sorted(urn_name(u) for u, deps in waiting.items() if deps)
        if stuck:
            raise RuntimeError(f"dependency cycle among {', '.join(stuck)}")

    walk(None)
    return out


def _restore_class(cls: type, saved: dict[str, Any]) -> None:
    """Put `cls`'s attributes back as `saved` holds them.

    Each `pulumi.dynamic.Resource` pickles its provider through `serialize_provider`, which
    wraps `pickle._Pickler._batch_setitems` around whatever is there and never restores it, so
    every dynamic resource ever built in the process adds a frame to the pickling of every dict
    after it (RecursionError once there are about as many as the recursion limit). The program
    undoes it per host (`rackform.targets.onprem.cluster.sdk_pickler_kept`); the recorder also
    leaves the pickler as it found it, so plans run one after another in one process (tests,
    a long-lived caller) never add up."""
    for name in set(vars(cls)) - set(saved):
        delattr(cls, name)
    for name, value in saved.items():
        if vars(cls).get(name) is not value:
            setattr(cls, name, value)


def record(plan: Plan, runtime: StackTarget, *, exiting: bool = False, **providers) -> list[Record]:
    """Every resource the program would register for this plan's stack, in tree order, with the
    stack config `rackform up` would set. `runtime`: the plan's target's part of the stack.
    `exiting`: the caller is a command whose process ends soon (see `_record`). Where the plan
    has a data tier of its own, the cluster's stack reads it through a StackReference: answered
    with what the data tier's program exports."""
    return record_stacks(plan, runtime, exiting=exiting, **providers)[-1][1]


def record_stacks(
    plan: Plan, runtime: StackTarget, *, exiting: bool = False, **providers
) -> list[tuple[str, list[Record]]]:
    """(stack, its records) for every stack of the plan, in the order `rackform up` brings them
    up: the data tier's stack (`plan.data_stack`) where there is one, then the cluster's."""

    def run() -> None:
        # The program's modules are imported only once the mocks are in place (the order
        # pulumi/examples testing-unit-py prescribes).
        from rackform.stack import program

        program.build(plan, runtime, **providers)

    out: list[tuple[str, list[Record]]] = []
    references: dict[str, dict[str, Any]] = {}
    if plan.data_stack is not None:
        data, outputs = record_data(plan, runtime, exiting=exiting)
        out.append((plan.data_stack, data))
        references[plan.data_stack] = outputs
    cluster = contextvars.copy_context().run(
        _record, run, plan.stack, thaw(plan.stack_config), exiting, references
    )[0]
    return [*out, (plan.stack, cluster)]


def record_data(
    plan: Plan,
    runtime: StackTarget,
    *,
    exiting: bool = False,
    config: dict[str, str] | None = None,
) -> tuple[list[Record], dict[str, Any]]:
    """The data tier's stack (`plan.data_stack`): its records and the outputs it exports.
    `config`: stack config beyond the plan's (what `rackform up` adds, e.g. rackform:adopt)."""

    def run() -> None:
        from rackform.stack import program

        program.build_data(plan, runtime)

    config = {**thaw(plan.data_stack_config), **(config or {})}
    return contextvars.copy_context().run(_record, run, plan.data_stack, config, exiting, {}, True)


def record_program(
    run: Callable[[], None],
    stack: str,
    config: dict[str, str] | None = None,
    *,
    exiting: bool = False,
    references: dict[str, dict[str, Any]] | None = None,
) -> list[Record]:
    """Run a Pulumi program function under the recording mocks. Each call gets a fresh context
    (Pulumi keeps its settings, config and root resource in context variables) and event loop,
    so it can be called again in the same process. `references`: see RecordingMocks."""
    return contextvars.copy_context().run(
        _record, run, stack, config or {}, exiting, references or {}
    )[0]


STACK_TRACE = "_get_stack_trace"


def _no_stack_trace() -> source_pb2.StackTrace:
    """What the SDK sends where it finds no user frame: an empty stack (no source position)."""
    return source_pb2.StackTrace()


# What the loop's objects say when the garbage collector finalizes them after a program failed:
# the tasks still waiting on the resource that raised, the futures holding its exception. The
# failure itself is raised to the caller; these say it again, at whatever later allocation the
# collector runs, and logging them formats a traceback, which parses Python source: inside
# another parse, CPython 3.11's AST constructor then raised SystemError ("AST constructor
# recursion depth mismatch") in an unrelated later parse of the same process.
AFTER_A_FAILURE = ("Task was destroyed but it is pending!", "exception was never retrieved")


def _after_a_failure(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if not str(context.get("message", "")).endswith(AFTER_A_FAILURE):
        loop.default_exception_handler(context)


def _record(
    run: Callable[[], None],
    stack: str,
    config: dict[str, str],
    exiting: bool,
    references: dict[str, dict[str, Any]],
    exports: bool = False,
) -> tuple[list[Record], dict[str, Any]]:
    """`exports`: run the program inside a root stack of its own, as `pulumi up` does, so its
    exports register as the stack's outputs (returned with the records)."""
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(_after_a_failure)
    asyncio.set_event_loop(loop)
    SETTINGS.outputs = set()
    set_all_config(config)
    mocks = RecordingMocks()  # (what tests put in its place takes no arguments)
    mocks.references = references
    monitor = RecordingMonitor(mocks)
    # The SDK allocates some hundred futures and closures per resource, all short-lived and
    # freed by reference counting; the cyclic collector only rescans them, over and over (half
    # the run time of a 512-node plan). It is switched off for the run and restored after.
    collecting = gc.isenabled()
    gc.disable()
    pickler = dict(vars(pickle._Pickler))
    # A private function of the SDK (pulumi/runtime/resource.py): where a release has it no
    # more, the recorder runs as the SDK is (the offline plan's speed test says when).
    traced = getattr(sdk_resource, STACK_TRACE, None)
    try:
        set_mocks(
            mocks,
            project=PROJECT,
            stack=stack,
            preview=True,
            monitor=monitor,
            organization=ORGANIZATION,
        )
        # Each registration walks and converts the whole Python stack into source positions
        # for the engine's diagnostics (a sixth of a 4,096-node plan); the mocks never read
        # them, so the recorder registers none.
        if traced is not None:
            setattr(sdk_resource, STACK_TRACE, _no_stack_trace)
        if exports:
            set_root_resource(None)  # set_mocks made an empty root stack; the program gets one
            loop.run_until_complete(run_in_stack(run))
        else:
            loop.run_until_complete(run_pulumi_func(run))
    finally:
        if traced is not None:
            setattr(sdk_resource, STACK_TRACE, traced)
        loop.close()
        asyncio.set_event_loop(None)
        if exiting:
            # What the run left is mostly the SDK's cyclic garbage (about 300 objects a
            # resource); collecting it is a quarter of a 4,096-node plan. A process that ends
            # soon leaves it to the operating system: frozen, no collection scans it again.
            gc.freeze()
        if collecting:
            gc.enable()
        _restore_class(pickle._Pickler, pickler)
    for r in monitor.records:
        r.inputs = {k: plain(v) for k, v in sorted(mocks.inputs.get((r.type, r.name), {}).items())}
    return tree_order(monitor.records), monitor.stack_outputs
