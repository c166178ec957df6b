"""The resumable job's batch script (the slurm role's rackform-resumable.sbatch): rendered by
Ansible's own templating from a compiled blueprint's variables, it asks sbatch for every node with
the placement the smoke job gets (`slurm_topology.placement`: `--segment=18` for NVL72 racks,
`--switches=1` for HGX nodes under one leaf), and runs validators.resumable through srun with
the job's own options. srun here is a stand-in on PATH that records its command line (no Slurm
runs the script in this test; the placement options themselves run in a real Slurm 24.11 with
topology/block in tests/scheduler/test_slurm_block.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.template import trust_as_template
from role_vars import render as role_expr
from test_slurm_config import ROLE, templar
from topology_bp import hgx_rails, nvl72_site, write

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective

TEMPLATE = (ROLE / "templates" / "resumable.sbatch.j2").read_text(encoding="utf-8")


def script(site: Path, **over) -> str:
    t = templar(site)
    t.available_variables = {**t.available_variables, **over}
    # Ansible's template module renders with trim_blocks on.
    return t.copy_with_new_env(trim_blocks=True).template(trust_as_template(TEMPLATE))


def directives(text: str) -> list[str]:
    return [
        line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH ")
    ]


def test_nvl72_racks_resumable_job_is_placed_as_the_smoke_job(tmp_path):
    site = write(tmp_path, nvl72_site(racks=2))
    gv = compile_effective(load_effective(site)).group_vars
    assert gv["smoke_train_slurm_placement"] == ("--segment=18",)
    got = directives(script(site))
    assert got == [
        "--nodes=36", "--ntasks-per-node=1", "--exclusive", "--mem=0", "--requeue",
        "--open-mode=append", "--gres=gpu:gb200:4", "--segment=18",
    ]  # fmt: skip
    # The same placement, from the same function over the same nodes.
    assert got[-1:] == list(gv["smoke_train_slurm_placement"])


def test_a_placement_the_topology_plugin_in_force_does_not_take_is_left_out(tmp_path):
    # On AWS the stack's topology (EC2's) may be a tree where the plan's is block.
    site = write(tmp_path, nvl72_site(racks=2))
    tree = directives(script(site, slurm_topology_plugin="topology/tree"))
    assert not any(d.startswith(("--segment", "--switches")) for d in tree), tree
    assert any(d.startswith("--nodes=") for d in tree)  # the job's other options stay
    assert "--segment=18" in directives(script(site, slurm_topology_plugin="topology/block"))


def test_hgx_nodes_under_one_leaf_get_switches_1(tmp_path):
    site = write(tmp_path, hgx_rails(units=1))
    got = directives(script(site))
    assert got[0] == "--nodes=4" and got[-1] == "--switches=1"


def test_without_a_placement_no_script_and_no_new_variable(tmp_path):
    # Two units under a spine: no one leaf holds every node, so no placement to give.
    gv = compile_effective(load_effective(write(tmp_path, hgx_rails(units=2)))).group_vars
    assert "smoke_train_slurm_placement" not in gv and "slurm_resumable_sbatch" not in gv
    tasks = yaml.safe_load((ROLE / "tasks" / "config.yml").read_text(encoding="utf-8"))
    (task,) = [t for t in tasks if "resumable" in t["name"]]
    assert task["when"] == "_slurm_is_controller and slurm_resumable_sbatch | length > 0"


def test_the_script_runs_the_resumable_job_through_srun_with_the_jobs_options(tmp_path):
    site = write(tmp_path, nvl72_site(racks=1, trays=2))
    validators = tmp_path / "smoke"
    (validators / "validators").mkdir(parents=True)
    text = script(
        site, slurm_health_check_validators=str(validators), slurm_health_check_python="/opt/py"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "srun.args"
    (bin_dir / "srun").write_text(f'#!/bin/sh\npwd > {seen}\nfor a; do echo "$a"; done >> {seen}\n')
    (bin_dir / "srun").chmod(0o755)
    (tmp_path / "job.sbatch").write_text(text)
    subprocess.run(
        ["sh", str(tmp_path / "job.sbatch"), "--steps", "40", "--checkpoint-every", "10"],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, check=True, cwd=tmp_path,
    )  # fmt: skip
    cwd, *argv = seen.read_text().splitlines()
    assert cwd == str(validators)
    assert argv == ["--label", "/opt/py", "-m", "validators.resumable",
                    "--steps", "40", "--checkpoint-every", "10"]  # fmt: skip


PATTERN_TASK = "The resumable job's sbatch options are options"


@pytest.mark.parametrize(
    ("options", "ok"),
    [
        (["--nodes=36", "--segment=18", "--gres=gpu:gb200:4", "--exclusive"], True),
        (["--switches=1"], True),
        (["--segment=18\n#SBATCH --uid=0"], False),  # a second directive smuggled in
        (["--segment=18\n"], False),
        (["--wrap=rm -rf /"], False),
        (["-N 2"], False),
        (["--comment=$(id)"], False),
    ],
)
def test_the_preflight_takes_options_and_refuses_anything_else(options, ok):
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text(encoding="utf-8"))
    (task,) = [t for t in tasks if PATTERN_TASK in t["name"]]
    (that,) = task["ansible.builtin.assert"]["that"]
    got = role_expr("slurm", that, {"slurm_resumable_sbatch": options}, ["c"])
    assert bool(got) is ok
