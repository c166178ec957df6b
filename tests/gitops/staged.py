"""A source environment's `up` as the Pulumi engine runs it, for the promotion tests: the real
program (`program.main`, what `pulumi up` runs) under Pulumi's mock runtime as an update, where
the mocks stand in for the engine (this machine has no Pulumi CLI): for the Validate resource
they call the real `ValidateProvider.create` on the resource's inputs, as the engine calls the
dynamic provider, so the report, the statement and its signature come from the stage's own
code. Only the work on the nodes (Ansible's smoke_train) is replaced: each node's report is
merged by the stage's own `merge_reports`. The stack outputs are kept as the engine records them.
The nodes' passing report and the deploy's keys are tests/promotion_world.py's.
"""

from __future__ import annotations

import asyncio
import contextvars
from pathlib import Path

from promotion_world import NODE
from pulumi.runtime import set_all_config, set_mocks
from pulumi.runtime.settings import SETTINGS, set_root_resource
from pulumi.runtime.stack import run_in_stack

from rackform.acceptance.cluster import merge_reports
from rackform.plan.inventory import inventory_hosts
from rackform.stack.offline import RecordingMocks, RecordingMonitor
from rackform.stack.stages import ValidateProvider, ValidationFailed


class NodeWork:
    """The smoke_train run on the nodes, replaced: `reports` per host (default: every host
    passes), merged by the Validate stage's own code."""

    def __init__(self, reports: dict[str, dict] | None = None):
        self.reports = reports

    def __call__(self, *, inventory, group_vars, validation, access, in_service=()):
        hosts = inventory_hosts(inventory)
        reports = self.reports if self.reports is not None else {h: NODE for h in hosts}
        return merge_reports(hosts, reports, 0)


class EngineMocks(RecordingMocks):
    def __init__(self, work: NodeWork):
        super().__init__()
        self.work = work

    def new_resource(self, args):
        rid, state = super().new_resource(args)
        if args.typ.endswith("rackform:Validate"):
            inputs = {k: v for k, v in args.inputs.items() if not k.startswith("__")}
            state = ValidateProvider(self.work).create(inputs).outs
        if args.typ.endswith("rackform:Configure"):
            state = {**state, "content_hash": "sha256:c", "result": {}, "drift": {}}
        if args.typ.endswith("rackform:Host"):
            state = {**state, "facts": {}}
        return rid, state


def up(project: Path, blueprint: Path, env: str, work: NodeWork | None = None) -> dict:
    """The stack outputs of `up` on `env` (raises what the program raises, but a failed
    strict validation: that `up` fails with its outputs recorded)."""
    from rackform.stack import program

    mocks = EngineMocks(work or NodeWork())
    monitor = RecordingMonitor(mocks)
    stack = f"{_name(blueprint)}-{env}"

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        SETTINGS.outputs = set()
        set_all_config({"rackform:blueprint": str(blueprint), "rackform:environment": env})
        set_mocks(mocks, project="rackform", stack=stack, preview=False, monitor=monitor)
        set_root_resource(None)  # the program gets its own root stack, as under `pulumi up`
        try:
            loop.run_until_complete(run_in_stack(lambda: program.main(project)))
        except ValidationFailed:
            pass  # `up` fails after the outputs, the report included, are recorded
        finally:
            loop.close()
            asyncio.set_event_loop(None)

    contextvars.copy_context().run(run)
    return monitor.stack_outputs


def _name(blueprint: Path) -> str:
    import yaml

    return yaml.safe_load(blueprint.read_text())["name"]
