"""rackform/catalog/rollout.yaml names every variable the plan gives the roles, once, with a
class; a variable added to the plan without one fails here (until then it would drain, the
safe side, and say nothing about why)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rackform.engine import prepare_all
from rackform.plan.inventory import VALIDATION_ONLY
from rackform.rollout.changes import CLASSES, ROLES, catalog, classify, compare, role_of

ROOT = Path(__file__).resolve().parents[2]


def planned_variables() -> set[str]:
    out: set[str] = set()
    for f in sorted((ROOT / "blueprints").glob("*.yaml")):
        for p in prepare_all(f):
            out |= set(p.plan.group_vars)
    return out


def test_every_variable_the_plan_sets_has_a_class():
    named = catalog().variables
    missing = sorted(planned_variables() - set(named))
    assert not missing, f"rollout.yaml names no class for {missing}"
    # The examples use the slurm role with fairness, so its variables are among them.
    assert "slurm_qos" in named and "slurm_accounts" in planned_variables()


def test_the_catalog_names_no_variable_the_plan_does_not_set():
    stale = sorted(set(catalog().variables) - planned_variables())
    assert not stale, f"rollout.yaml names {stale}, which no plan sets"


def test_the_catalog_is_written_once_per_variable():
    text = (ROOT / "rackform" / "catalog" / "rollout.yaml").read_text()
    keys = [line.split(":")[0].strip() for line in text.split("variables:")[1].splitlines()]
    keys = [k for k in keys if k and not k.startswith("#")]
    assert len(keys) == len(set(keys))
    assert set(yaml.safe_load(text)["variables"].values()) <= set(CLASSES)


def test_the_roles_are_the_repositorys_roles_and_each_has_its_minutes():
    assert sorted(ROLES) == sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())
    assert sorted(catalog().converge) == sorted(ROLES)


def test_how_to_check_is_never_what_to_install():
    for v in VALIDATION_ONLY:
        assert classify(v) == "none", v
    # ...and what installs a driver or a kernel module reboots.
    assert classify("nvidia_driver_branch") == "reboot" and classify("nccl_rdma_fabric") == "reboot"


def test_a_variable_the_catalog_does_not_know_drains():
    (c,) = compare({"nvidia_driver_new_knob": 1}, {"nvidia_driver_new_knob": 2})
    assert c.cls == "drain" and c.role == "nvidia_driver"


def test_the_longest_role_name_wins():
    assert role_of("smoke_train_slurm_gres") == "smoke_train"
    assert role_of("slurm_qos") == "slurm" and role_of("rackform_digest") is None
