"""The smoke job's and host checks' command lines: the smoke_train role composes them on the
nodes from the variables rackform's plan hands it, and `rackform smoke` builds them with
rackform/acceptance/argv.py. Rendered with Ansible's own templating, the role's lines are the
builder's, for every example blueprint, so the validators receive the same arguments either way."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from gpu_collection import ROLES_DIR

from rackform.acceptance.argv import host_argv, job_argv
from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import thaw

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "blueprints").glob("*.yaml"))
HOSTS = ["node-a", "node-b", "node-c"]


def role_lines(variables: dict) -> tuple[list[str], list[str]]:
    """The role's `_smoke_train_job_argv` and `_smoke_train_host_argv` for the first host, with
    its defaults under the given variables, as Ansible renders them."""
    role = ROLES_DIR / "smoke_train"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    own = yaml.safe_load((role / "vars" / "main.yml").read_text(encoding="utf-8"))
    names = ("_smoke_train_job_argv", "_smoke_train_host_argv")
    env = {
        **{k: v for k, v in defaults.items() if "{{" not in str(v)},
        **variables,
        # Role files are trusted templates (Ansible renders them); plain data is not.
        **{k: trust_as_template(own[k]) for k in names},
        "ansible_play_hosts_all": HOSTS,
        "inventory_hostname": HOSTS[0],
        # What the role registers before it composes the lines (the job archive's checksum).
        "_smoke_train_archive_stat": {"stat": {"checksum": "0" * 40}},
        **{k: trust_as_template(v) if isinstance(v, str) else v for k, v in own.items()},
    }
    templar = Templar(loader=DataLoader(), variables=env)
    job, host = (templar.template(trust_as_template("{{ %s }}" % name)) for name in names)  # noqa: UP031
    return [str(a) for a in job], [str(a) for a in host]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_roles_lines_are_the_builders(example):
    plan = compile_effective(load_effective(example))
    variables = thaw(plan.group_vars)
    job, host = role_lines(variables)
    exp = plan.expectations
    if exp is None:  # several node groups: no expectations, only the run's own arguments
        assert variables["smoke_train_job_args"] == variables["smoke_train_host_args"] == []
        return
    mount = plan.checkpoint.mount
    assert job == job_argv(
        exp, steps=plan.validation.smoke_steps, checkpoint_dir=mount, nodes=len(HOSTS)
    )
    shared = (
        {"run": host[host.index("--shared-run") + 1], "peers": HOSTS} if exp.shared_mount else {}
    )
    assert host == host_argv(
        exp, storage_dir=mount, probe_mb=4096, expect_mount=mount, node=HOSTS[0], **shared
    )
    # With a shared tier every node checks it sees every other node's file there.
    assert ("--shared-peers" in host) == (exp.shared_mount is not None)
    if exp.shared_mount:
        assert host[host.index("--shared-peers") + 1] == "node-a,node-b,node-c"


def test_model_arguments_follow_the_expectations():
    plan = compile_effective(load_effective(EXAMPLES[0]))
    variables = {**thaw(plan.group_vars), "smoke_train_model_args": ["--preset", "tiny"]}
    job, _ = role_lines(variables)
    assert job[-2:] == ["--preset", "tiny"]
    assert job[:-2] == job_argv(
        plan.expectations, steps=plan.validation.smoke_steps,
        checkpoint_dir=plan.checkpoint.mount, nodes=len(HOSTS),
    )  # fmt: skip


def test_a_rack_scale_trays_host_checks_check_its_imex_domain(tmp_path):
    # Two GB200 NVL72 racks of three trays: each tray's inventory entry lists its own domain's
    # addresses (the same list on each of them, never the other rack's), and the host checks'
    # line carries them, the role's as rackform's.
    from topology_bp import nvl72_site, write

    from rackform.plan.inventory import inventory

    plan = compile_effective(load_effective(write(tmp_path, nvl72_site(racks=2, trays=3))))
    (group,) = inventory(plan)["all"]["children"]["gpu_nodes"]["children"].values()
    members = {name: h.get("imex_domain_members") for name, h in group["hosts"].items()}
    rack1 = ["10.80.1.11", "10.80.1.12", "10.80.1.13"]
    rack2 = ["10.80.2.11", "10.80.2.12", "10.80.2.13"]
    assert members == {
        **dict.fromkeys(["gb1-t01", "gb1-t02", "gb1-t03"], rack1),
        **dict.fromkeys(["gb2-t01", "gb2-t02", "gb2-t03"], rack2),
    }
    _, host = role_lines({**thaw(plan.group_vars), "imex_domain_members": rack1})
    mount = plan.checkpoint.mount
    assert host == host_argv(
        plan.expectations, storage_dir=mount, probe_mb=4096, expect_mount=mount,
        node=HOSTS[0], imex_members=rack1,
    )  # fmt: skip
    assert host[-2:] == ["--imex-members", ",".join(rack1)]


def test_an_hgx_node_gets_no_imex_domain(tmp_path):
    from topology_bp import hgx_rails, write

    from rackform.plan.inventory import inventory

    plan = compile_effective(load_effective(write(tmp_path, hgx_rails(units=1, per_unit=2))))
    for group in inventory(plan)["all"]["children"]["gpu_nodes"]["children"].values():
        assert all("imex_domain_members" not in h for h in group["hosts"].values())
