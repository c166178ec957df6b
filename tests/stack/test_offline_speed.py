"""What the offline recorder does to run a large plan faster, and that it changes no record:
it registers no source positions (the SDK's private `_get_stack_trace`, which walks the whole
Python stack per resource) and, for a command whose process ends soon, freezes the SDK's
garbage instead of collecting it. benchmarks/plan_bench.py measures the gain; these tests say
when a Pulumi release has moved what the recorder patches, and that the records are the same."""

from __future__ import annotations

import gc

from blueprint_helpers import BARE_METAL
from pulumi.runtime import resource as sdk_resource

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.stack import offline
from rackform.targets.runtimes import runtime


def test_the_sdk_still_has_the_function_the_recorder_replaces():
    assert callable(getattr(sdk_resource, offline.STACK_TRACE, None)), (
        "pulumi's runtime/resource.py has no _get_stack_trace any more: the offline recorder now"
        " registers source positions again (slower plans); find what replaced it"
    )


def _plan(tmp_path):
    path = tmp_path / "bm.yaml"
    path.write_text(BARE_METAL)
    return compile_effective(load_effective(path))


def test_the_records_are_the_same_either_way_and_the_sdk_is_left_as_it_was(tmp_path, monkeypatch):
    plan = _plan(tmp_path)
    before = getattr(sdk_resource, offline.STACK_TRACE)
    fast = [
        (r.type, r.name, r.parent, r.inputs, r.dependencies)
        for r in offline.record(plan, runtime(plan.target_type))
    ]
    assert getattr(sdk_resource, offline.STACK_TRACE) is before
    monkeypatch.setattr(offline, "STACK_TRACE", "_no_such_function")  # as if a release moved it
    slow = [
        (r.type, r.name, r.parent, r.inputs, r.dependencies)
        for r in offline.record(plan, runtime(plan.target_type))
    ]
    assert fast == slow and len(fast) > 3


def test_an_exiting_command_freezes_what_the_run_left_and_collection_goes_on(tmp_path):
    plan = _plan(tmp_path)
    frozen = gc.get_freeze_count()
    try:
        exiting = [
            (r.type, r.name, r.inputs)
            for r in offline.record(plan, runtime(plan.target_type), exiting=True)
        ]
        assert gc.get_freeze_count() > frozen and gc.isenabled()
        assert exiting == [
            (r.type, r.name, r.inputs) for r in offline.record(plan, runtime(plan.target_type))
        ]
    finally:
        gc.unfreeze()
