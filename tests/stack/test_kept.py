"""No kept resource depends on one `destroy` deletes (rackform/stack/kept.py), over every
blueprint the repository ships (each environment) and generated shapes of every kind of shared
tier, run through the real program under Pulumi's mocks: the data tier's stack and the
cluster's, as `rackform up` brings them up, with `rackform destroy` destroying the cluster's.

Then the check itself is tried with programs built to slip past it: a dependency only through an
input, through a component, through a parent, through another kept resource, an id that reached
an input as a plain string (no dependency at all), `protect` rather than `retain_on_delete`,
and a kept resource of one stack naming a resource of the stack that is destroyed."""

from __future__ import annotations

import pulumi
import pytest
from planhelp import AWS_INFERENCE, AWS_SLURM, AWS_TRAINING, variant, write_blueprint

from rackform.blueprint.loader import load_all, load_effective
from rackform.engine import compile_effective
from rackform.paths import project_root
from rackform.stack.kept import violations
from rackform.stack.offline import record_program, record_stacks
from rackform.targets.runtimes import runtime

ROOT = project_root()
SHIPPED = sorted((ROOT / "blueprints").glob("*.yaml"))


def _stacks(plan):
    return record_stacks(plan, runtime(plan.target_type))


def _check(plan) -> list[str]:
    """What `rackform destroy` destroys is the cluster's stack, never the data tier's."""
    stacks = _stacks(plan)
    assert [s for s, _ in stacks][-1] == plan.stack
    return violations(stacks, destroyed={plan.stack})


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_blueprint_keeps_nothing_that_depends_on_what_destroy_deletes(path):
    for effective in load_all(path):
        assert _check(compile_effective(effective)) == [], (path.name, effective.environment)


def _shared(**tier) -> dict:
    return {"storage": {"shared": tier}}


FSX = {"fsx": {"storage_tib": 4.8, "import_path": "s3://ml-data/tok/"}}
TIERS = {
    "fsx-kept-with-datasets": FSX,
    "fsx-scratch-kept": {"fsx": {"deployment": "SCRATCH_2", "storage_tib": 1.2}},
    "fsx-persistent-1-kept": {"fsx": {"deployment": "PERSISTENT_1", "import_path": "s3://ml-data"}},
    "fsx-not-kept": {"fsx": {"retain": False, "import_path": "s3://ml-data"}},
    "fsx-existing": {"fsx": {"file_system_id": "fs-0123456789abcdef0"}},
    "efs-kept": {"holds": ["home"], "efs": {}},
    "efs-not-kept": {"holds": ["home"], "efs": {"retain": False}},
    "efs-existing": {"holds": ["home"], "efs": {"file_system_id": "fs-0abc1234"}},
    "nfs-server": {"server": {"type": "nfs", "address": "10.0.9.9", "export": "/data"}},
}
SHAPES = {
    "training": AWS_TRAINING,
    "inference": AWS_INFERENCE,
    "slurm-spot": AWS_SLURM,
    "protected": variant(AWS_TRAINING, lifecycle={"protect": True}),
    "baked": {**AWS_TRAINING, "image": {"bake": True}},
    "object-tier": {**AWS_TRAINING, "storage": {"object": {"url": "s3://ckpt/run"}}},
}


# Every kind of tier on the three node shapes; the other shapes with the tiers that are kept.
KEPT = ("fsx-kept-with-datasets", "efs-kept")


def _generated():
    for shape, doc in SHAPES.items():
        for tier, shared in TIERS.items():
            if shape not in ("training", "inference", "slurm-spot") and tier not in KEPT:
                continue
            storage = {**doc.get("storage", {}), **_shared(**shared)["storage"]}
            yield pytest.param({**doc, "storage": storage}, id=f"{shape}-{tier}")


@pytest.mark.parametrize("doc", list(_generated()))
def test_every_generated_stack_keeps_nothing_that_depends_on_what_destroy_deletes(tmp_path, doc):
    plan = compile_effective(load_effective(write_blueprint(tmp_path, doc)))
    assert _check(plan) == []


def test_a_kept_file_system_is_kept_by_a_stack_of_its_own_not_by_retain_on_delete(tmp_path):
    plan = compile_effective(
        load_effective(write_blueprint(tmp_path, {**AWS_TRAINING, **_shared(**FSX)}))
    )
    (data, data_records), (cluster, cluster_records) = _stacks(plan)
    assert (data, cluster) == (f"{plan.stack}-data", plan.stack)
    # No resource anywhere is retained on delete: the file system is kept by never being in a
    # stack that destroy destroys, and protected there.
    assert not [r.name for _, rs in _stacks(plan) for r in rs if r.retain_on_delete]
    assert all(r.protect for r in data_records)
    fs = [r for r in data_records if r.type.endswith("LustreFileSystem")]
    assert len(fs) == 1 and not [r for r in cluster_records if "fsx" in r.type]


# The check itself, against programs built to slip past it.


def _run(program, stack: str = "s") -> list:
    return record_program(program, stack)


def _subnet(name: str = "net", **opts):
    import pulumi_aws as aws

    vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block="10.0.0.0/16", opts=pulumi.ResourceOptions(**opts))
    return aws.ec2.Subnet(
        f"{name}-subnet",
        vpc_id=vpc.id,
        cidr_block="10.0.0.0/24",
        opts=pulumi.ResourceOptions(**opts),
    )


def _fs(name: str, subnet_id, **opts):
    import pulumi_aws as aws

    return aws.fsx.LustreFileSystem(
        name,
        storage_capacity=1200,
        deployment_type="SCRATCH_2",
        subnet_ids=subnet_id,
        opts=pulumi.ResourceOptions(**opts),
    )


def test_todays_shape_is_caught_a_retained_file_system_in_a_subnet_destroy_deletes():
    def program():
        _fs("fs", _subnet().id, retain_on_delete=True)

    found = violations([("s", _run(program))], destroyed={"s"})
    assert found == [
        "fs (aws:fsx/lustreFileSystem:LustreFileSystem, stack s) -> net-subnet (aws:ec2/subnet:Subnet, stack s)"
    ]


def test_protect_counts_as_kept():
    found = violations([("s", _run(lambda: _fs("fs", _subnet().id, protect=True)))], {"s"})
    assert len(found) == 1 and found[0].startswith("fs ")


def test_a_dependency_through_a_component_is_caught():
    import pulumi_aws as aws

    class Net(pulumi.ComponentResource):
        def __init__(self):
            super().__init__("test:net:Net", "net-component")
            aws.ec2.Vpc(
                "hidden-vpc", cidr_block="10.0.0.0/16", opts=pulumi.ResourceOptions(parent=self)
            )
            self.register_outputs({})

    def program():
        net = Net()
        # No input names the VPC: only depends_on on the component that holds it.
        _fs("fs", "subnet-123", retain_on_delete=True, depends_on=[net])

    found = violations([("s", _run(program))], {"s"})
    assert found == [
        "fs (aws:fsx/lustreFileSystem:LustreFileSystem, stack s) -> hidden-vpc (aws:ec2/vpc:Vpc, stack s)"
    ]


def test_a_custom_parent_is_a_dependency():
    def program():
        subnet = _subnet()
        _fs("fs", "subnet-123", retain_on_delete=True, parent=subnet)

    assert len(violations([("s", _run(program))], {"s"})) == 1


def test_an_id_passed_as_a_plain_string_is_still_caught():
    def program():
        subnet = _subnet()
        # The id reaches the input with no dependency at all (as from config, or read back
        # from the stack's outputs): the engine would not know; the reference still names it.
        subnet.id.apply(lambda got: _fs("fs", got, retain_on_delete=True))

    found = violations([("s", _run(program))], {"s"})
    assert (
        found
        and found[0].startswith("fs ")
        and found[0].endswith("net-subnet (aws:ec2/subnet:Subnet, stack s)")
    )


def test_a_kept_resource_through_another_kept_one_is_caught_both():
    import pulumi_aws as aws

    def program():
        fs = _fs("fs", _subnet().id, retain_on_delete=True)
        aws.fsx.DataRepositoryAssociation(
            "dra",
            file_system_id=fs.id,
            data_repository_path="s3://d",
            file_system_path="/d",
            opts=pulumi.ResourceOptions(retain_on_delete=True),
        )

    found = violations([("s", _run(program))], {"s"})
    assert [f.split(" ")[0] for f in found] == ["dra", "fs"]
    assert " -> fs (" in found[0] and found[0].endswith(
        "net-subnet (aws:ec2/subnet:Subnet, stack s)"
    )


def test_a_kept_stack_naming_a_resource_of_the_destroyed_stack_is_caught():
    def data():
        # A file system in the kept stack, in a subnet the cluster's stack holds (its id as the
        # cluster's stack would export it).
        _fs("fs", "<net-subnet>.id")

    stacks = [("data", _run(data, "data")), ("cluster", _run(lambda: _subnet(), "cluster"))]
    found = violations(stacks, destroyed={"cluster"})
    assert found == [
        "fs (aws:fsx/lustreFileSystem:LustreFileSystem, stack data) -> net-subnet (aws:ec2/subnet:Subnet, stack cluster)"
    ]


def test_what_is_kept_together_and_what_goes_together_pass():
    def program():
        kept = _subnet("kept", protect=True)
        _fs("kept-fs", kept.id, protect=True)  # kept with what it sits in
        gone = _subnet("gone")
        _fs("gone-fs", gone.id)  # deleted with it
        # A deleted resource may depend on a kept one (the cluster's nodes in the data's subnet).
        _fs("nodes", kept.id)

    assert violations([("s", _run(program))], {"s"}) == []
    # A stack nobody destroys keeps everything in it.
    assert violations([("s", _run(lambda: _fs("fs", _subnet().id)))], destroyed=set()) == []


def test_a_read_resource_is_never_deleted():
    import pulumi_aws as aws

    def program():
        existing = aws.ec2.Subnet.get("existing", "subnet-0123")
        _fs("fs", existing.id, retain_on_delete=True)

    assert violations([("s", _run(program))], {"s"}) == []


def test_todays_program_would_fail_the_check(tmp_path):
    """The same file system in the cluster's stack with retain_on_delete, as the program made it
    before the data tier had a stack of its own: the check names the subnet and the groups."""
    plan = compile_effective(
        load_effective(write_blueprint(tmp_path, {**AWS_TRAINING, **_shared(**FSX)}))
    )
    data, _ = _stacks(plan)
    # Put the data tier's records back in the cluster's stack, retained instead of protected.
    records = [
        type(r)(
            **{**r.__dict__, "protect": False, "retain_on_delete": r.type.startswith("aws:fsx")}
        )
        for r in data[1]
    ]
    found = violations([(plan.stack, records)], destroyed={plan.stack})
    kept = {f.split(" ")[0] for f in found}
    assert kept == {f"{plan.stack}-shared", f"{plan.stack}-shared-datasets"}, found
