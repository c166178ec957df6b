"""The `scheduler:` section: a Slurm cluster loads, and each mistake is one located line at the
field that breaks it, with a fix."""

from __future__ import annotations

import textwrap

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError

SLURM = """
scheduler:
  type: slurm
  controller: n1
  partitions:
    - {name: batch, node_groups: [hgx], default: true, priority_tier: 10}
    - {name: scavenger, node_groups: [hgx], priority_tier: 1, preemptible: true}
  preemption: {mode: requeue, grace_s: 90}
"""


def problems(write, text) -> dict:
    with pytest.raises(BlueprintError) as exc:
        load_effective(write(text))
    return {p.path: p for p in exc.value.problems}


def test_a_slurm_cluster_loads(write):
    s = load_effective(write(BARE_METAL + SLURM)).blueprint.scheduler
    assert s.controller == "n1"
    assert [(p.name, p.default, p.preemptible) for p in s.partitions] == [
        ("batch", True, False),
        ("scavenger", False, True),
    ]
    assert s.preemption.grace_s == 90


def test_an_inference_cluster_has_no_scheduler(write):
    text = BARE_METAL.replace("purpose: training", "purpose: inference") + SLURM
    (p,) = problems(write, text).values()
    assert p.path == "scheduler"
    lines = textwrap.dedent(text).lstrip("\n").splitlines()
    assert "training clusters" in p.message
    assert p.line == lines.index("  type: slurm") + 1  # where the section starts


def test_aws_is_refused_until_the_stack_makes_a_controller(write):
    text = AWS_TRAINING + SLURM.replace("node_groups: [hgx]", "node_groups: [gpu]")
    (p,) = problems(write, text.replace("  controller: n1\n", "")).values()
    assert "controller instance" in p.message and "bare_metal" in p.fix


@pytest.mark.parametrize(
    "old,new,path,needle,fix",
    [
        ("controller: n1", "controller: n1x", "scheduler.controller",
         "controller 'n1x' is not a host of this blueprint", "did you mean 'n1'?"),
        ("  controller: n1\n", "", "scheduler.controller", "Slurm needs a controller host",
         "one of n1, n2"),
        ("node_groups: [hgx], default", "node_groups: [hgz], default",
         "scheduler.partitions[0].node_groups[0]", "names 'hgz', which is not a node group",
         "did you mean 'hgx'?"),
        ("node_groups: [hgx], default", "node_groups: [], default",
         "scheduler.partitions[0].node_groups", "partition 'batch' names no nodes", "hgx"),
        ("name: scavenger", "name: batch", "scheduler.partitions[1].name",
         "partition 'batch' is declared twice", "rename"),
        ("default: true, ", "", "scheduler.partitions", "no partition is the default",
         "exactly one"),
        ("priority_tier: 1,", "default: true, priority_tier: 1,", "scheduler.partitions",
         "2 partitions are the default (batch, scavenger)", "exactly one"),
        ("priority_tier: 10", "priority_tier: 1", "scheduler.partitions[1].preemptible",
         "no partition of a higher priority_tier shares its nodes", "preemptible: false"),
    ],
)  # fmt: skip
def test_each_mistake_is_one_located_line(write, old, new, path, needle, fix):
    assert old in SLURM
    got = problems(write, BARE_METAL + SLURM.replace(old, new))
    assert list(got) == [path]
    assert needle in got[path].message
    assert fix in got[path].fix
    assert got[path].line is not None


def test_preemption_mode_is_requeue(write):
    got = problems(write, BARE_METAL + SLURM.replace("mode: requeue", "mode: cancel"))
    assert list(got) == ["scheduler.preemption.mode"]
