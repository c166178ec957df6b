"""The stages' work: what the program hands the Configure and Validate providers, and each name
an earlier release recorded it by, found again when such a provider is unpickled from a state."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import dill
import pytest
from planhelp import BARE_METAL, plan
from pulumi.dynamic.dynamic import serialize_provider

from rackform.stack import offline
from rackform.stack.stages import ConfigureProvider, StageUnavailable, ValidateProvider
from rackform.stage_work import CONFIGURE, EARLIER, VALIDATE

RECORDED = Path(__file__).parent / "stack" / "previous_release" / "providers.json"


def test_each_earlier_name_reaches_the_function_of_that_name_the_stages_run_today():
    today = {*CONFIGURE.values(), *VALIDATE.values()}
    for name, fn in EARLIER.items():
        module, _, attr = name.partition(":")
        assert module.startswith("rackform.") and attr == fn.__name__, name
        assert fn in today, name
    # Every piece of work is reached from at least one earlier name.
    assert set(EARLIER.values()) == today


def test_a_provider_the_previous_release_pickled_runs_todays_work():
    resources = json.loads(RECORDED.read_text())["resources"]
    stages = {r["type"].rsplit(":", 1)[-1]: r for r in resources}
    configure = dill.loads(base64.b64decode(stages["Configure"]["outputs"]["__provider"]))
    validate = dill.loads(base64.b64decode(stages["Validate"]["outputs"]["__provider"]))
    assert {k: getattr(configure, k) for k in CONFIGURE} == CONFIGURE
    assert {k: getattr(validate, k) for k in VALIDATE} == VALIDATE


def test_a_recorded_name_no_release_knows_fails_where_it_would_run_not_on_delete():
    old = ConfigureProvider(**CONFIGURE)
    old.work = "rackform.gone:configure"  # as a release's pickle held it
    copy = dill.loads(base64.b64decode(serialize_provider(old)))
    assert copy.work == "rackform.gone:configure" and copy.drift is CONFIGURE["drift"]
    nodes = {"all": {"children": {"gpu_nodes": {"children": {"g": {"hosts": {"n1": {}}}}}}}}
    props = {"cluster": "c", "inventory": nodes, "expected_nodes": {"min": 1, "max": 1}}
    with pytest.raises(StageUnavailable, match=r"rackform\.gone\.configure is not in this"):
        copy.create({**props, "group_vars": {}})
    assert copy.delete("c-configure", props) is None


def test_the_program_hands_the_stages_this_work(tmp_path, monkeypatch):
    kept: dict[str, str] = {}

    class Keeping(offline.RecordingMocks):
        def new_resource(self, args):
            if "__provider" in args.inputs:
                kept[args.typ.rsplit(":", 1)[-1]] = args.inputs["__provider"]
            return super().new_resource(args)

    monkeypatch.setattr(offline, "RecordingMocks", Keeping)
    plan(tmp_path, BARE_METAL)
    for kind, cls, work in (
        ("Configure", ConfigureProvider, CONFIGURE),
        ("Validate", ValidateProvider, VALIDATE),
    ):
        provider = dill.loads(base64.b64decode(kept[kind]))
        assert type(provider) is cls
        assert {k: getattr(provider, k) for k in work} == work
