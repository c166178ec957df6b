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


# AWS_TRAINING with hyphenated names, the blueprint's and its node groups', and the stack's
# own controller (no `controller:`).
AWS_SLURM = (
    AWS_TRAINING.replace("name: t-cluster", "name: llm-train-a")
    .replace("  - name: gpu\n", "  - name: gpu-a\n")
    .replace(
        "network:",
        "  - name: gpu-b\n    instance_type: g6e.12xlarge\n    count: 1\nnetwork:",
    )
    .replace("  ssh_cidrs:", "  ami: {image: ubuntu-24.04}\n  ssh_cidrs:")
    + """
scheduler:
  type: slurm
  partitions:
    - {name: batch, node_groups: [gpu-a, gpu-b], default: true}
"""
)


def test_aws_training_takes_slurm_with_a_controller_of_its_own(write):
    s = load_effective(write(AWS_SLURM)).blueprint.scheduler
    assert s.controller is None and s.controller_instance_type is None
    typed = AWS_SLURM.replace(
        "  type: slurm\n", "  type: slurm\n  controller_instance_type: c7i.xlarge\n"
    )
    assert load_effective(write(typed)).blueprint.scheduler.controller_instance_type == "c7i.xlarge"


def test_aws_refuses_a_host_as_controller_and_names_the_stacks_instance(write):
    text = AWS_SLURM.replace("  type: slurm\n", "  type: slurm\n  controller: gpu-a-0\n")
    (p,) = problems(write, text).values()
    assert p.path == "scheduler.controller"
    assert "llm-train-a-<environment>-slurmctld" in p.message and "not a host" in p.message
    assert "remove controller" in p.fix and "m7i.large" in p.fix
    assert (
        p.line == textwrap.dedent(text).lstrip("\n").splitlines().index("  controller: gpu-a-0") + 1
    )


@pytest.mark.parametrize(
    "value,needle",
    [
        ("p5.48xlarge", "is a GPU instance type"),  # in the catalog: every one has GPUs
        ("g6e.12xlarge", "is a GPU instance type"),
        ("m7i", "is not an EC2 instance type name"),  # no size
        ("M7i.large", "is not an EC2 instance type name"),
        ("m7i.large; rm -rf /", "is not an EC2 instance type name"),
        (".large", "is not an EC2 instance type name"),
    ],
)
def test_the_controller_instance_type_is_a_small_ec2_type(write, value, needle):
    text = AWS_SLURM.replace(
        "  type: slurm\n", f"  type: slurm\n  controller_instance_type: {value!r}\n"
    )
    got = problems(write, text)
    assert list(got) == ["scheduler.controller_instance_type"]
    assert needle in got["scheduler.controller_instance_type"].message
    assert got["scheduler.controller_instance_type"].line is not None


@pytest.mark.parametrize("value", ["m7i.large", "c7i.xlarge", "m7i-flex.large", "u-6tb1.metal"])
def test_ec2_type_names_with_hyphens_pass(write, value):
    text = AWS_SLURM.replace(
        "  type: slurm\n", f"  type: slurm\n  controller_instance_type: {value}\n"
    )
    assert load_effective(write(text)).blueprint.scheduler.controller_instance_type == value


def test_aws_partitions_count_the_stacks_instances(write):
    (p,) = problems(
        write,
        AWS_SLURM.replace("count: 1", "count: 0").replace(
            "node_groups: [gpu-a, gpu-b]", "node_groups: [gpu-b]"
        ),
    ).values()
    assert p.path == "scheduler.partitions[0].node_groups"
    assert "names no nodes" in p.message


def test_bare_metal_has_no_controller_instance_to_size(write):
    text = BARE_METAL + SLURM.replace(
        "  controller: n1\n", "  controller: n1\n  controller_instance_type: m7i.large\n"
    )
    (p,) = problems(write, text).values()
    assert p.path == "scheduler.controller_instance_type"
    assert "host of the blueprint" in p.message and p.fix == "remove controller_instance_type"


def test_aws_inference_keeps_refusing_a_scheduler(write):
    text = AWS_SLURM.replace("purpose: training", "purpose: inference")
    got = problems(write, text)
    assert "training clusters" in got["scheduler"].message


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


def test_aws_slurm_needs_an_image_whose_slurm_the_role_supports(write):
    text = AWS_SLURM.replace("ami: {image: ubuntu-24.04}", "ami: {image: dlami-ubuntu-22.04}")
    (p,) = problems(write, text).values()
    assert p.path == "target.ami.image"
    assert "Slurm 21.08" in p.message and "ubuntu-24.04" in p.fix
    assert (
        p.line
        == textwrap.dedent(text)
        .lstrip("\n")
        .splitlines()
        .index("  ami: {image: dlami-ubuntu-22.04}")
        + 1
    )
    # The default image (22.04) is refused too, located at the target it belongs to.
    (p,) = problems(write, AWS_SLURM.replace("  ami: {image: ubuntu-24.04}\n", "")).values()
    assert p.path == "target.ami.image" and p.line is not None
