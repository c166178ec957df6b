"""The compiled scheduler: Slurm's nodes with the node groups' GPUs, partitions with their nodes,
one switch per rack, and the slurm role's variables made from them."""

from __future__ import annotations

from pathlib import Path

from blueprint_helpers import BARE_METAL, SLURM_MIXED

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.scheduler import gres_type
from rackform.plan.slurm import Switch

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_compiles_to_racks_partitions_and_gpus():
    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    s = plan.scheduler
    assert s.controller == "hgx-01"
    assert {(n.name, n.gpus, n.gpu_type) for n in s.nodes} == {
        (f"hgx-0{i}", 8, "h100_sxm") for i in range(1, 5)
    }
    assert s.switches == (
        Switch("rack-r1", ("hgx-01", "hgx-02")),
        Switch("rack-r2", ("hgx-03", "hgx-04")),
        Switch("root", switches=("rack-r1", "rack-r2")),
    )
    assert [(p.name, p.default, p.preemptible) for p in s.partitions] == [
        ("batch", True, False),
        ("scavenger", False, True),
    ]
    assert (s.preempt_mode, s.grace_s, s.checkpoint_dir) == ("requeue", 120, "/mnt/checkpoints")
    v = plan.group_vars
    assert v["slurm_enabled"] is True and v["slurm_interface"] == "ib0"
    assert v["slurm_partitions"][0]["max_time_min"] == 4320
    assert v["slurm_partitions"][1]["max_time_min"] == 0  # unlimited
    # The smoke job: one Slurm job from the controller, every node's eight H100s as GRES.
    assert {k: x for k, x in v.items() if k.startswith("smoke_train_slurm")} == {
        "smoke_train_slurm": True,
        "smoke_train_slurm_submit_host": "hgx-01",
        "smoke_train_slurm_gres": "gpu:h100_sxm:8",
    }


def test_a_cpu_group_has_no_gpus_and_unracked_hosts_share_one_switch(write):
    plan = compile_effective(load_effective(write(SLURM_MIXED)))
    s = plan.scheduler
    assert {n.name: (n.gpus, n.gpu_type) for n in s.nodes} == {
        "n1": (8, "h100_sxm"),
        "n2": (8, "h100_sxm"),
        "c1": (0, None),
    }
    assert {p.name: p.nodes for p in s.partitions} == {
        "gpu": ("n1", "n2"),
        "spare": ("n1", "n2", "c1"),
    }
    assert s.switches == (Switch("cluster", ("n1", "n2", "c1")),)  # no racks: no root either
    assert plan.group_vars["slurm_nodes"][2] == {"name": "c1", "gpus": 0, "gpu_type": ""}
    # One job cannot ask a CPU host and the GPU hosts for the same GRES: no smoke job through Slurm.
    assert plan.group_vars["smoke_train_slurm"] is False


def test_without_a_scheduler_the_role_is_off_and_gets_nothing_else(write):
    plan = compile_effective(load_effective(write(BARE_METAL)))
    assert plan.scheduler is None
    assert {k: v for k, v in plan.group_vars.items() if k.startswith("slurm")} == {
        "slurm_enabled": False
    }
    assert not any(k.startswith("smoke_train_slurm") for k in plan.group_vars)


def test_gres_types_are_slurm_names():
    assert gres_type("H100-SXM") == "h100_sxm"
    assert gres_type("A100-SXM-80GB") == "a100_sxm_80gb"
