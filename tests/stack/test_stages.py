"""Configure and Validate: their providers called directly (create / diff / update / delete, as
the engine would), the providers surviving the pickling the engine does, and their place after
the nodes under Pulumi's mock runtime."""

from __future__ import annotations

import base64
import json

import dill
import pytest
from planhelp import AWS_INFERENCE, AWS_TRAINING, BARE_METAL, of_type, one, plan
from pulumi.dynamic.dynamic import serialize_provider

from rackform.evidence.shipped import roles_hash
from rackform.stack.stages import (
    ConfigureProvider,
    StageUnavailable,
    ValidateProvider,
    content_hash,
)
from rackform.stage_work import CONFIGURE, VALIDATE
from rackform.targets.onprem.hosts import HostProvider, probe

INVENTORY = {
    "all": {
        "vars": {"ansible_user": "ubuntu"},
        "children": {
            "gpu_nodes": {
                "children": {
                    "ng_gpu": {
                        "hosts": {
                            "n1": {"ansible_host": "10.0.0.1", "ansible_port": 22},
                            "n2": {"ansible_host": "10.0.0.2", "ansible_port": 22},
                        }
                    }
                }
            }
        },
    }
}
GROUP_VARS = {"nvme_raid_level": 0, "nccl_rdma_fabric": "efa"}


def configure_props(**changes):
    props = {
        "cluster": "t-train-dev",
        "inventory": INVENTORY,
        "group_vars": GROUP_VARS,
        "roles_hash": "sha256:r",
        "content_hash": content_hash("sha256:r", GROUP_VARS, INVENTORY),
        "expected_nodes": {"min": 2, "max": 2},
    }
    return {**props, **changes}


class Work:
    """What the Ansible run / the smoke job returns; records each call. It stands in for the
    roles and the validator, which are other modules' subject, not this one's."""

    def __init__(self, result):
        self.result = result
        self.calls: list[dict] = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return self.result


def test_configure_create_runs_the_roles_over_the_inventory():
    work = Work({"ok": True, "changed": 12})
    out = ConfigureProvider(work).create(configure_props())
    assert out.id == "t-train-dev-configure"
    assert work.calls == [{"inventory": INVENTORY, "group_vars": GROUP_VARS, "access": None}]
    assert out.outs["result"] == {"ok": True, "changed": 12}
    assert out.outs["content_hash"] == configure_props()["content_hash"]


def test_configure_refuses_a_partial_inventory():
    work = Work({})
    props = configure_props(expected_nodes={"min": 3, "max": 3})
    with pytest.raises(RuntimeError, match="2 hosts but the blueprint has 3"):
        ConfigureProvider(work).create(props)
    assert work.calls == []
    scaled = configure_props(expected_nodes={"min": 1, "max": 6})
    ConfigureProvider(work).create(scaled)  # an autoscaling group anywhere in its range
    assert len(work.calls) == 1


def test_configure_reruns_only_when_the_content_hash_changes():
    provider = ConfigureProvider(Work({}))
    olds = {**configure_props(), "result": {"ok": True}}
    assert not provider.diff("id", olds, configure_props()).changes
    new_vars = {**GROUP_VARS, "nvme_raid_level": 10}
    changed = configure_props(
        group_vars=new_vars, content_hash=content_hash("sha256:r", new_vars, INVENTORY)
    )
    d = provider.diff("id", olds, changed)
    assert d.changes and d.replaces == []
    roles = configure_props(content_hash=content_hash("sha256:other", GROUP_VARS, INVENTORY))
    assert provider.diff("id", olds, roles).changes


def test_configure_update_runs_again_and_delete_runs_nothing():
    work = Work({"ok": True})
    provider = ConfigureProvider(work)
    provider.update("id", configure_props(), configure_props(group_vars={"x": 1}))
    assert work.calls[-1]["group_vars"] == {"x": 1}
    provider.delete("id", configure_props())
    assert len(work.calls) == 1


def test_roles_hash_follows_what_reaches_the_nodes(tmp_path):
    coll = tmp_path / "gpu"
    assert roles_hash(coll) == roles_hash(tmp_path / "none")  # no roles yet: a stable hash
    (coll / "roles" / "nvme_raid" / "tasks").mkdir(parents=True)
    task = coll / "roles" / "nvme_raid" / "tasks" / "main.yml"
    task.write_text("- name: a\n")
    first = roles_hash(coll)
    task.write_text("- name: b\n")
    assert roles_hash(coll) != first
    task.write_text("- name: a\n")
    assert roles_hash(coll) == first
    # A module, module_utils and the site playbook run on nodes too ...
    for rel in ("plugins/module_utils/sysfs.py", "playbooks/site.yml"):
        (coll / rel).parent.mkdir(parents=True, exist_ok=True)
        (coll / rel).write_text("x = 1\n")
        assert roles_hash(coll) != first
        (coll / rel).unlink()
    assert roles_hash(coll) == first
    # ... the collection's README, changelog and byte-compiled caches do not.
    (coll / "README.md").write_text("docs\n")
    (coll / "roles" / "__pycache__").mkdir()
    (coll / "roles" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    assert roles_hash(coll) == first


def test_a_stage_without_its_work_is_a_clear_error_where_it_would_run():
    provider = ConfigureProvider(Work({}))
    with pytest.raises(StageUnavailable, match="given no drift work, so nothing was configured"):
        provider.read("id", {**configure_props(), "result": {}, "drift": {}})
    with pytest.raises(StageUnavailable, match="given no validation work, so nothing was valid"):
        ValidateProvider().create(validate_props())
    assert provider.delete("id", configure_props()) is None


def validate_props(strict=True, **changes):
    props = {
        "cluster": "t-train-dev",
        "inventory": INVENTORY,
        "group_vars": GROUP_VARS,
        "validation": {"strict": strict, "smoke_steps": 50, "expected": {"nodes": 2}},
        "digest": "sha256:d",
        "configured_hash": "sha256:c",
        "request": "",
        "attest": {"stack": "t-train-dev", "cluster": "t-train", "environment": "dev",
                   "pin": {"blueprint": "sha256:d"}},
    }  # fmt: skip
    return {**props, **changes}


PASS = {"name": "loss_drop", "status": "pass", "measured": 0.6, "expected": 0.2, "unit": ""}
FAIL = {
    "name": "allreduce_busbw",
    "status": "fail",
    "measured": 120,
    "expected": 460,
    "unit": "GB/s",
}
NOT_RUN = {"name": "dcgm_diag", "status": "not-run", "measured": None, "expected": "r1"}


def test_validate_puts_the_report_and_its_signed_statement_in_its_outputs(tmp_path, monkeypatch):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from rackform.evidence.signing import SIGNING_ENV, key_id, payload, signature_ok

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    monkeypatch.setenv(SIGNING_ENV, pem.decode())  # the deploy's secret, read when signing
    work = Work({"checks": [PASS, NOT_RUN], "nodes": {"n1": {}, "n2": {}}})
    out = ValidateProvider(work).create(validate_props())
    assert out.outs["passed"] is True
    assert out.outs["report"]["checks"] == [PASS, NOT_RUN]
    env = out.outs["evidence"]
    (sig,) = env["signatures"]
    assert sig["keyid"] == key_id(key.public_key())
    assert signature_ok(key.public_key(), env, sig["sig"])
    st = json.loads(payload(env))
    pred = st["predicate"]
    assert (pred["cluster"], pred["environment"], pred["stack"]) == (
        "t-train",
        "dev",
        "t-train-dev",
    )
    assert pred["pin"] == {"blueprint": "sha256:d"} and pred["passed"] is True
    assert pred["nodes"] == {"expected": ["n1", "n2"], "reported": ["n1", "n2"]}
    assert pred["report"]["checks"] == [PASS, NOT_RUN] and pred["validated_at"]
    assert "PRIVATE" not in json.dumps(out.outs)  # the key is never in the outputs
    assert work.calls[0]["validation"]["expected"] == {"nodes": 2}
    # Without the key (any deploy but the signing one) the statement is made, unsigned.
    monkeypatch.delenv(SIGNING_ENV)
    assert ValidateProvider(work).create(validate_props()).outs["evidence"]["signatures"] == []


@pytest.mark.parametrize("strict", [True, False])
def test_a_failed_validation_is_recorded_with_measured_and_expected_never_raised(strict):
    # The create returns: the engine records the resource with its report, and the program
    # fails `up` afterwards when strict (tests/stack/test_program.py).
    out = ValidateProvider(Work({"checks": [PASS, FAIL]})).create(validate_props(strict=strict))
    assert out.outs["passed"] is False
    assert out.outs["failure"] == "allreduce_busbw: measured 120 GB/s, expected 460 GB/s"
    assert out.outs["report"]["checks"] == [PASS, FAIL]


def test_nothing_checked_is_never_a_pass():
    for checks in ([NOT_RUN], []):
        out = ValidateProvider(Work({"checks": checks})).create(validate_props())
        assert out.outs["passed"] is False
        assert "no check passed" in out.outs["failure"]


def test_validate_reruns_on_new_nodes_configuration_or_request_never_on_a_cosmetic_edit():
    provider = ValidateProvider(Work({"checks": [PASS]}))
    olds = {**validate_props(), "report": {}, "passed": True}
    assert not provider.diff("id", olds, validate_props()).changes
    # The digest, the thresholds and the smoke steps change with an edit of the blueprint that
    # changes nothing on the nodes: the smoke job does not rerun on a live cluster for them.
    cosmetic = validate_props(
        digest="sha256:e",
        validation={"strict": True, "smoke_steps": 80, "expected": {"nodes": 2}},
        group_vars={**GROUP_VARS, "smoke_train_steps": 80},
    )
    assert not provider.diff("id", olds, cosmetic).changes
    assert provider.diff("id", olds, validate_props(configured_hash="sha256:x")).changes
    assert provider.diff("id", olds, validate_props(request="2026-11-24T10:00")).changes
    moved = {**INVENTORY, "all": {**INVENTORY["all"], "vars": {"ansible_user": "root"}}}
    assert provider.diff("id", olds, validate_props(inventory=moved)).changes
    work = Work({"checks": [PASS]})
    ValidateProvider(work).update("id", olds, validate_props(request="again"))
    assert len(work.calls) == 1


def test_refresh_runs_the_roles_in_check_mode_and_names_the_hosts_that_drifted():
    checked = Work({"hosts": {"n1": [], "n2": ["nccl_rdma : Write /etc/nccl.conf"]}})
    provider = ConfigureProvider(Work({}), drift=checked)
    olds = {**configure_props(), "result": {"ok": True}, "drift": {}}
    read = provider.read("id", olds)
    assert checked.calls == [{"inventory": INVENTORY, "group_vars": GROUP_VARS, "access": None}]
    assert read.outs["drift"] == {"n2": ["nccl_rdma : Write /etc/nccl.conf"]}
    # The recorded hash no longer matches what `up` would compute: the next `up` converges.
    assert read.outs["content_hash"] == "drifted:n2"
    assert provider.diff("id", read.outs, configure_props()).changes
    clean = ConfigureProvider(Work({}), drift=Work({"hosts": {"n1": [], "n2": []}}))
    same = clean.read("id", olds)
    assert same.outs["drift"] == {}
    assert not clean.diff("id", same.outs, configure_props()).changes


def test_providers_survive_the_engines_pickling():
    # The engine stores each dynamic provider dill-pickled and runs it in another process: the
    # stages' work goes with them by reference, not by value.
    for provider, work in (
        (ConfigureProvider(**CONFIGURE), CONFIGURE),
        (ValidateProvider(**VALIDATE), VALIDATE),
    ):
        pickled = base64.b64decode(serialize_provider(provider))
        copy = dill.loads(pickled)
        assert type(copy) is type(provider)
        assert {k: getattr(copy, k) for k in work} == work
        for fn in work.values():
            assert fn.__module__.encode() in pickled and b"_create_function" not in pickled
    hosts = dill.loads(base64.b64decode(serialize_provider(HostProvider())))
    assert hosts.probe_fn is probe


def test_configure_waits_for_every_node_and_validate_for_configure(tmp_path):
    for doc in (AWS_TRAINING, BARE_METAL, AWS_INFERENCE):
        recs = plan(tmp_path, doc)
        configure = one(recs, "rackform:Configure")
        validate = one(recs, "rackform:Validate")
        nodes = (
            of_type(recs, "ec2/instance:Instance")
            + of_type(recs, "rackform:Host")
            + of_type(recs, "autoscaling/group:Group")
        )
        assert nodes
        assert {n.name for n in nodes} <= set(configure.dependencies)
        assert configure.name in validate.dependencies
        order = [r.name for r in recs]
        assert max(order.index(n.name) for n in nodes) < order.index(configure.name)
        assert order.index(configure.name) < order.index(validate.name)


def test_on_prem_inventory_is_known_before_up(tmp_path):
    configure = one(plan(tmp_path, BARE_METAL), "rackform:Configure")
    hosts = configure.inputs["inventory"]["all"]["children"]["gpu_nodes"]["children"]["ng_hgx"]
    assert hosts["hosts"]["n1"] == {"ansible_host": "10.0.0.1", "ansible_port": 2222}
    assert configure.inputs["content_hash"].startswith("sha256:")
    assert configure.inputs["expected_nodes"] == {"min": 2, "max": 2}


def test_aws_inventory_is_known_only_after_up(tmp_path):
    configure = one(plan(tmp_path, AWS_TRAINING), "rackform:Configure")
    assert configure.inputs["inventory"] == "(known after up)"
    assert configure.inputs["content_hash"] == "(known after up)"


# `rackform up`'s wait for the nodes configured at boot, as the stack records it
# (rackform/boot/waiting.py): the check the stage adds to its report.
BOOT_FAIL = {
    "name": "boot_reports",
    "status": "fail",
    "measured": 1,
    "expected": 2,
    "unit": "nodes",
    "detail": "n2 missing",
}
BOOT_PASS = {**BOOT_FAIL, "status": "pass", "measured": 2, "detail": "every node passed (2)"}


def _value(check):
    return json.dumps(check)


def _statement(outs):
    from rackform.evidence.signing import payload

    return json.loads(payload(outs["evidence"]))


def test_a_failed_wait_for_the_nodes_configured_at_boot_fails_the_validation_and_its_evidence():
    out = (
        ValidateProvider(Work({"checks": [PASS]}))
        .create(validate_props(boot=_value(BOOT_FAIL)))
        .outs
    )
    assert out["report"]["checks"] == [PASS, BOOT_FAIL]
    assert out["passed"] is False
    assert out["failure"] == "boot_reports: measured 1 nodes, expected 2 nodes"
    pred = _statement(out)["predicate"]
    # What promotion reads (rackform/evidence/statement.py `check`): not passed.
    assert pred["passed"] is False and pred["report"]["checks"][-1] == BOOT_FAIL
    # A stack the wait never touched ("" or, made before the input, absent): no such check.
    for none in ("", None):
        plain = ValidateProvider(Work({"checks": [PASS]})).create(validate_props(boot=none)).outs
        assert plain["report"]["checks"] == [PASS] and plain["passed"] is True


def test_a_new_wait_outcome_alone_judges_the_last_report_again_running_nothing():
    first = ValidateProvider(Work({"checks": [PASS]})).create(
        validate_props(boot=_value(BOOT_FAIL))
    )
    olds = first.outs
    work = Work({"checks": [FAIL]})  # what a new run would find: it must not run
    provider = ValidateProvider(work)
    news = validate_props(boot=_value(BOOT_PASS))
    assert provider.diff("id", olds, news).changes
    out = provider.update("id", olds, news).outs
    assert work.calls == []
    assert out["report"]["checks"] == [PASS, BOOT_PASS]  # replaced, not added to
    assert out["passed"] is True and out["boot"] == _value(BOOT_PASS)
    before, after = _statement(olds)["predicate"], _statement(out)["predicate"]
    assert after["validated_at"] == before["validated_at"]  # the run's time, not the wait's
    assert after["passed"] is True
    # The same outcome again changes nothing; a stack made before the input has none.
    assert not provider.diff("id", out, news).changes
    legacy = {k: v for k, v in validate_props().items() if k != "boot"}
    assert not provider.diff("id", {**legacy, "report": {}}, validate_props(boot="")).changes
    # With new nodes as well, the stage runs on them, and the wait's outcome joins its report.
    rerun = provider.update("id", out, validate_props(boot=_value(BOOT_FAIL), request="again"))
    assert len(work.calls) == 1
    assert rerun.outs["report"]["checks"] == [FAIL, BOOT_FAIL]


def test_a_hand_edited_wait_record_never_passes():
    out = (
        ValidateProvider(Work({"checks": [PASS]}))
        .create(validate_props(boot='{"name": "boot_reports", "status": "passed"}'))
        .outs
    )
    assert out["passed"] is False and "boot_reports" in out["failure"]


def test_a_rerun_names_the_nodes_the_last_run_passed_as_in_service():
    """A serving node the last run passed serves now: the stage's next run hands it to the work
    as in service (read-only checks only); one that failed, or sent nothing, is not."""
    last = {
        "nodes": {"n1": {}, "n2": {}, "n-3": {}},
        "checks": [
            {"name": "n1/gpu_count", "status": "pass", "node": "n1"},
            {"name": "n2/decode_tokens_per_s", "status": "fail", "node": "n2"},
            {"name": "n-3/gpu_count", "status": "pass", "node": "n-3"},
            {"name": "node_reports", "status": "fail"},
        ],
    }
    olds = {**validate_props(), "report": last, "passed": False}
    work = Work({"checks": [PASS]})
    ValidateProvider(work).update("id", olds, validate_props(request="again"))
    assert work.calls[0]["in_service"] == ["n-3", "n1"]
    first = Work({"checks": [PASS]})
    ValidateProvider(first).create(validate_props())
    assert first.calls[0]["in_service"] == []
