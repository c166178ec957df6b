"""A blueprint that keeps its file system in the data tier's own stack, through the commands that
act (rackform/stack/data_stack.py), against the recording stand-in `pulumi` on PATH
(tests/cli/fake_pulumi.py) and moto's server for the lookups by tag: `up` brings the data stack
up first; `destroy` destroys the cluster's stack only and says what it kept, and the `up` after
it finds the kept file system again; a data stack whose state was lost adopts what AWS still has
instead of creating a second file system; a cluster's stack from before the split is refused by
`up`, `preview`, `destroy` and reap until `rackform data move` (a dry run unless --apply) moves
its pieces, by `pulumi state move`; `destroy --data` names what is lost."""

from __future__ import annotations

import json
import subprocess
import sys

import fake_pulumi
import moto_server
import pytest
import yaml
from blueprint_helpers import ROOT
from planhelp import AWS_TRAINING

from rackform.engine import prepare
from rackform.plan.targets.aws.data_layout import pieces

STACK, DATA = "t-train-default", "t-train-default-data"
KEPT = {
    **AWS_TRAINING,
    "storage": {"shared": {"fsx": {"deployment": "SCRATCH_2", "storage_tib": 1.2}}},
}


@pytest.fixture
def world(tmp_path, endpoint):
    """The stand-in `pulumi`, moto's server (emptied), and a blueprint that keeps its FSx."""
    bin_dir = tmp_path / "bin"
    fake_pulumi.install(bin_dir)
    aws = moto_server.Aws(endpoint)
    aws.reset()
    bp = tmp_path / "kept.yaml"
    bp.write_text(yaml.safe_dump(KEPT, sort_keys=False))

    def run(*args, stdin: str | None = None, aws_down: bool = False, **env):
        """`aws_down`: AWS (moto) cannot be reached: any lookup would fail the command."""
        base = fake_pulumi.environ(bin_dir, tmp_path, **env)
        return subprocess.run(
            [sys.executable, "-m", "rackform", *map(str, args)],
            cwd=ROOT,
            env=moto_server.aws_env("http://127.0.0.1:9" if aws_down else endpoint, base),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
        )

    run.tmp, run.bp, run.aws = tmp_path, bp, aws
    run.plan = prepare(bp).plan
    return run


def _calls(world) -> list[list[str]]:
    log = world.tmp / "pulumi.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [[a for a in json.loads(x)["argv"] if a != "--non-interactive"] for x in lines]


def _ops(world) -> list[tuple[str, str]]:
    """(operation, stack) of each preview, up and destroy, in order."""
    return [
        (c[0], c[c.index("--stack") + 1])
        for c in _calls(world)
        if c and c[0] in ("preview", "up", "destroy")
    ]


def _data_held(world) -> list[str]:
    """The data stack's state as its first `up` leaves it: every piece, under the component."""
    plan = world.plan
    return [p.urn(plan.data_stack, "rackform:aws:DataTier") for p in pieces(plan)]


def _before_the_split(world) -> list[str]:
    """A cluster's stack as rackform made it before the data tier had its own: the pieces at
    their former URNs, with the rest of the cluster."""
    plan = world.plan
    rest = f"urn:pulumi:{STACK}::rackform::rackform:cluster:Cluster$rackform:aws:Cluster"
    return [p.urn(plan.stack) for p in pieces(plan)] + [
        f"{rest}$rackform:aws:Network$aws:ec2/internetGateway:InternetGateway::{STACK}-igw",
        f"{rest}$aws:iam/role:Role::{STACK}-node-role",
    ]


def test_up_brings_the_data_stack_up_first_with_its_own_config(world):
    r = world("up", world.bp, "--boot-deadline", "0")
    assert r.returncode == 0, r.stderr
    assert _ops(world) == [("up", DATA), ("up", STACK)]
    config = fake_pulumi.config_of(world.tmp, DATA)
    assert config["rackform:tier"] == "data"
    assert (
        config["rackform:blueprint"]
        == fake_pulumi.config_of(world.tmp, STACK)["rackform:blueprint"]
    )
    assert (config["rackform:adopt"], config["rackform:release"]) == ("", "")  # nothing found
    assert "rackform:tier" not in fake_pulumi.config_of(world.tmp, STACK)
    # Nothing was in AWS to adopt; it looked (by the tags) for what the new stack lacks.
    assert f"up of stack {DATA} (the data tier, which destroy keeps)" in r.stdout


def test_up_refresh_reads_both_stacks_live_state(world):
    fake_pulumi.set_resources(world.tmp, DATA, _data_held(world))
    r = world("up", world.bp, "--boot-deadline", "0", "--refresh", aws_down=True)
    assert r.returncode == 0, r.stderr
    ups = [c for c in _calls(world) if c and c[0] == "up"]
    assert [c[c.index("--stack") + 1] for c in ups] == [DATA, STACK]
    assert all("--refresh" in c for c in ups)


def test_destroy_destroys_the_cluster_only_and_the_next_up_finds_the_file_system_again(world):
    fake_pulumi.set_resources(world.tmp, DATA, _data_held(world))
    fake_pulumi.set_resources(
        world.tmp, STACK, [f"urn:pulumi:{STACK}::rackform::rackform:cluster:Cluster::{STACK}"]
    )
    r = world("destroy", world.bp, "--yes")
    assert r.returncode == 0, r.stderr
    assert _ops(world) == [("destroy", STACK)]
    assert f"kept stack {DATA}: FSx for Lustre SCRATCH_2" in r.stdout
    assert fake_pulumi.held(world.tmp, DATA) == _data_held(world)  # untouched
    assert fake_pulumi.held(world.tmp, STACK) == []
    # The next up: the data stack holds every piece, so nothing is looked for (AWS is out of
    # reach here: a lookup would fail the command) or created again.
    r = world("up", world.bp, "--boot-deadline", "0", aws_down=True)
    assert r.returncode == 0, r.stderr
    assert _ops(world)[1:] == [("up", DATA), ("up", STACK)]
    assert fake_pulumi.config_of(world.tmp, DATA)["rackform:adopt"] == ""


def test_reaps_destroy_never_touches_the_data_stack(world, monkeypatch):
    for k, v in moto_server.aws_env(
        world.aws.endpoint, fake_pulumi.environ(world.tmp / "bin", world.tmp)
    ).items():
        monkeypatch.setenv(k, v)
    from rackform.targets.aws.reap import AwsReaper

    fake_pulumi.set_resources(world.tmp, DATA, _data_held(world))
    (out,) = AwsReaper().act(world.plan, "destroy")
    assert out.ok and out.detail == f"stack destroyed; its data tier {DATA} kept"
    assert _ops(world) == [("destroy", STACK)]
    assert fake_pulumi.held(world.tmp, DATA) == _data_held(world)


def test_a_lost_data_stack_adopts_what_aws_still_has_instead_of_a_second_file_system(world):
    """The data stack's state is gone (no stack), the file system and its network are not: `up`
    finds each by its tags and has the data stack import it (rackform:adopt)."""
    plan, ec2 = world.plan, world.aws.client("ec2", "us-east-1", record=False)

    def tags(name):
        every = {**plan.tag_map, "Name": name}
        return [{"Key": k, "Value": v} for k, v in every.items()]

    def spec(kind, name):
        return [{"ResourceType": kind, "Tags": tags(name)}]

    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", TagSpecifications=spec("vpc", f"{STACK}-vpc"))
    vpc_id = vpc["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(
        VpcId=vpc_id, CidrBlock="10.0.0.0/17", TagSpecifications=spec("subnet", f"{STACK}-nodes")
    )
    subnet_id = subnet["Subnet"]["SubnetId"]
    groups = {}
    for name in (f"{STACK}-eice-sg", f"{STACK}-sg"):
        g = ec2.create_security_group(
            GroupName=f"{name}-a1b2c3d",
            Description="x",
            VpcId=vpc_id,
            TagSpecifications=spec("security-group", name),
        )
        groups[name] = g["GroupId"]
    # Another cluster's file system, and one of this cluster's other environment: not ours.
    fsx = world.aws.client("fsx", "us-east-1", record=False)
    other = [{"Key": "Name", "Value": f"{STACK}-shared"}, {"Key": "rackform:cluster", "Value": "t-train"},
             {"Key": "rackform:environment", "Value": "prod"}]  # fmt: skip
    fsx.create_file_system(
        FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=[subnet_id], Tags=other
    )
    fs = fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[subnet_id],
        Tags=tags(f"{STACK}-shared"),
    )["FileSystem"]["FileSystemId"]

    r = world("up", world.bp, "--boot-deadline", "0")
    assert r.returncode == 0, r.stderr
    adopt = json.loads(fake_pulumi.config_of(world.tmp, DATA)["rackform:adopt"])
    assert adopt == {
        f"{STACK}-vpc": {"id": vpc_id},
        f"{STACK}-nodes": {"id": subnet_id},
        f"{STACK}-eice-sg": {"id": groups[f"{STACK}-eice-sg"], "name": f"{STACK}-eice-sg-a1b2c3d"},
        f"{STACK}-sg": {"id": groups[f"{STACK}-sg"], "name": f"{STACK}-sg-a1b2c3d"},
        f"{STACK}-shared": {"id": fs},
    }
    assert f"{STACK}-shared ({fs}) outlived {DATA}'s state: imported, not created again" in r.stdout
    assert _ops(world) == [("up", DATA), ("up", STACK)]


def test_an_up_that_cannot_look_for_what_the_data_stack_lacks_creates_nothing(world):
    r = world("up", world.bp, "--boot-deadline", "0", aws_down=True)
    assert r.returncode == 2
    assert f"could not look in AWS for what {DATA} does not hold" in r.stderr
    assert "nothing was created" in r.stderr
    assert _ops(world) == []


def test_two_file_systems_with_its_tags_are_refused_not_guessed_between(world):
    plan = world.plan
    tags = [{"Key": k, "Value": v} for k, v in {**plan.tag_map, "Name": f"{STACK}-shared"}.items()]
    fsx = world.aws.client("fsx", "us-east-1", record=False)
    for _ in range(2):
        fsx.create_file_system(
            FileSystemType="LUSTRE",
            StorageCapacity=1200,
            SubnetIds=["subnet-0123456789abc"],
            Tags=tags,
        )
    r = world("up", world.bp, "--boot-deadline", "0")
    assert r.returncode == 2
    assert f"2 resources carry the tags of {STACK}-shared" in r.stderr
    assert "nothing was created" in r.stderr
    assert _ops(world) == []


@pytest.mark.parametrize(
    "command",
    [("up", "--boot-deadline", "0"), ("preview",), ("destroy", "--yes")],
    ids=["up", "preview", "destroy"],
)
def test_a_stack_from_before_the_split_is_refused_until_moved(world, command):
    fake_pulumi.set_resources(world.tmp, STACK, _before_the_split(world))
    r = world(command[0], world.bp, *command[1:])
    assert r.returncode == 2, r.stdout
    assert (
        f"stack {STACK} still holds its data tier from before it had a stack of its own" in r.stderr
    )
    assert f"`rackform data move {world.bp} --env default`" in r.stderr
    assert _ops(world) == []


def test_reap_refuses_a_stack_from_before_the_split(world, monkeypatch):
    for k, v in fake_pulumi.environ(world.tmp / "bin", world.tmp).items():
        monkeypatch.setenv(k, v)
    from rackform.targets.aws.reap import AwsReaper

    fake_pulumi.set_resources(world.tmp, STACK, _before_the_split(world))
    (out,) = AwsReaper().act(world.plan, "destroy")
    assert not out.ok and "rackform data move" in out.detail and "then reap again" in out.detail
    assert _ops(world) == []


def test_data_move_is_a_dry_run_then_moves_the_state_and_up_goes_ahead(world):
    fake_pulumi.set_resources(world.tmp, STACK, _before_the_split(world))
    former = [p.urn(STACK) for p in pieces(world.plan)]
    r = world("data", "move", world.bp)
    assert r.returncode == 0, r.stderr
    assert "Would move (dry run: nothing changed; --apply moves)" in r.stdout
    assert all(f"  {u}" in r.stdout for u in former)
    assert not [c for c in _calls(world) if c[:2] == ["state", "move"]]
    assert fake_pulumi.held(world.tmp, STACK) == _before_the_split(world)

    r = world("data", "move", world.bp, "--apply")
    assert r.returncode == 0, r.stderr
    (call,) = [c for c in _calls(world) if c[:2] == ["state", "move"]]
    assert call[2:7] == ["--source", STACK, "--dest", DATA, "--yes"] and call[7:] == former
    # The state moved (stack renamed, type chain kept: what the data program's aliases name).
    assert fake_pulumi.held(world.tmp, DATA) == [
        u.replace(f"urn:pulumi:{STACK}::", f"urn:pulumi:{DATA}::") for u in former
    ]
    assert set(fake_pulumi.held(world.tmp, STACK)) == set(_before_the_split(world)) - set(former)
    assert fake_pulumi.config_of(world.tmp, DATA)["rackform:tier"] == "data"
    assert f"moved {len(former)} resources to {DATA}" in r.stdout
    # Now up goes ahead; the data stack holds every piece, so nothing is looked for in AWS.
    r = world("up", world.bp, "--boot-deadline", "0", aws_down=True)
    assert r.returncode == 0, r.stderr
    assert _ops(world) == [("up", DATA), ("up", STACK)]
    # A second move has nothing to move.
    r = world("data", "move", world.bp, "--apply")
    assert r.returncode == 2 and "nothing to move" in r.stderr


def test_data_move_refuses_to_give_the_data_stack_two_of_a_piece(world):
    fake_pulumi.set_resources(world.tmp, STACK, _before_the_split(world))
    fake_pulumi.set_resources(world.tmp, DATA, _data_held(world)[:1])
    r = world("data", "move", world.bp, "--apply")
    assert r.returncode == 2 and f"{DATA} already holds {STACK}-vpc" in r.stderr
    assert not [c for c in _calls(world) if c[:2] == ["state", "move"]]


def test_destroy_data_names_what_is_lost_and_lifts_the_protection_first(world):
    fake_pulumi.set_resources(world.tmp, DATA, _data_held(world))
    r = world("destroy", world.bp, "--data", stdin="n\n")
    assert r.returncode == 1
    assert (
        f"Destroy every resource of stack {STACK} and of its data tier's stack {DATA}: FSx for "
        "Lustre SCRATCH_2, 1.2 TiB x 200 MB/s/TiB and every file on it" in r.stdout
    )
    assert _ops(world) == []
    r = world("destroy", world.bp, "--data", "--yes")
    assert r.returncode == 0, r.stderr
    assert _ops(world) == [("destroy", STACK), ("up", DATA), ("destroy", DATA)]
    assert fake_pulumi.config_of(world.tmp, DATA)["rackform:release"] == "true"
    assert f"destroyed stack {DATA}: the file system and its data are gone" in r.stdout
    # The next up protects it again.
    r = world("up", world.bp, "--boot-deadline", "0")
    assert r.returncode == 0, r.stderr
    assert fake_pulumi.config_of(world.tmp, DATA)["rackform:release"] == ""


def test_destroy_data_without_a_data_tier_is_refused(world):
    r = world("destroy", "blueprints/aws-training.yaml", "--env", "dev", "--data", "--yes")
    assert r.returncode == 2 and "keeps no file system in a stack of its own" in r.stderr
    assert _ops(world) == []


def test_data_move_without_the_pulumi_cli_says_so(world):
    r = world("data", "move", world.bp, PATH=str(world.tmp / "empty"))
    assert r.returncode == 2
    assert "pulumi" in r.stderr and "install" in r.stderr
