"""moto's AWS server on loopback (reap's EC2 and Auto Scaling, a node's artifact bucket, the
object tier's S3), as boto3 sees it over HTTP, with clients that sign with dummy credentials and
record every operation they call.

moto keeps its state in this process (ThreadedMotoServer serves the same backends), so `Aws.reset`
empties it between tests, and `Aws.launched` can set what the API cannot: how long ago an
instance was launched."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
AMI = "ami-12c6146b"  # one of the images moto's EC2 starts with

# An AWS training cluster with Slurm, as the commands after `up` see it: its stack's instances
# are named (their Name tags) as the plan names them (rackform/blueprint/targets/aws/names.py).
STACK = "llm-train-a-dev"
NODES = (f"{STACK}-gpu-a-0", f"{STACK}-gpu-a-1")
CTL = f"{STACK}-slurmctld"


def aws_slurm(lifecycle: str = "", environments: tuple[str, ...] = ("dev",)) -> str:
    """The blueprint of that cluster, with a `lifecycle:` section's body if given."""
    envs = "".join(f"  {e}: {{}}\n" for e in environments)
    life = f"lifecycle:\n{lifecycle}" if lifecycle else ""
    return f"""\
name: llm-train-a
purpose: training
owner: team@example.com
target: {{type: aws, region: us-east-1, availability_zone: us-east-1a, ami: {{image: ubuntu-24.04}}}}
node_groups:
  - {{name: gpu-a, instance_type: p5.48xlarge, count: 2}}
network: {{fabric: efa}}
workload: {{model_params_b: 7, method: full, checkpoint_interval_min: 30}}
scheduler:
  type: slurm
  partitions: [{{name: batch, node_groups: [gpu-a], default: true}}]
{life}environments:
{envs}"""


def aws_env(endpoint: str, base: dict[str, str]) -> dict[str, str]:
    """`base` with boto3 pointed at moto's server (its own AWS_ENDPOINT_URL setting), dummy
    credentials, and no instance metadata service: for a `rackform` subprocess."""
    return {
        **base,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


# Fixtures a test module takes by importing them.
@pytest.fixture
def no_aws(monkeypatch, tmp_path):
    """Never reach AWS, the instance metadata address or a developer's own credentials."""
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for var in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def endpoint():
    with moto_server() as url:
        yield url


@pytest.fixture
def aws(endpoint):
    a = Aws(endpoint)
    a.reset()
    return a


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's server on 127.0.0.1 for the length of the block; yields its endpoint URL. Port 0:
    the server binds a free port itself (no window between probing a port and binding it)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


class Aws:
    """What a test arranges in moto, and the clients a reaper is handed."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.calls: list[str] = []  # every operation any reaper's client made, in order
        self.ec2 = self.client("ec2", REGION, record=False)
        self.asg = self.client("autoscaling", REGION, record=False)

    def reset(self) -> None:
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass
        self.calls.clear()

    def client(self, service: str, region: str, *, record: bool = True):
        c = boto3.client(
            service,
            region_name=region,
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        if record:
            c.meta.events.register(
                f"before-call.{c.meta.service_model.service_name}",
                lambda model, **_: self.calls.append(model.name),
            )
        return c

    def did(self, operation: str) -> int:
        return self.calls.count(operation)

    def launch(
        self,
        cluster: str,
        n: int = 2,
        *,
        env: str = "default",
        tags: dict[str, str] | None = None,
        hours_ago: float = 5,
    ) -> list[str]:
        """`n` running instances tagged as rackform tags a cluster's nodes, launched `hours_ago`."""
        every = {"rackform:cluster": cluster, "rackform:environment": env, **(tags or {})}
        answer = self.ec2.run_instances(
            ImageId=AMI,
            MinCount=n,
            MaxCount=n,
            InstanceType="g6e.12xlarge",
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in every.items()],
                }
            ],
        )
        ids = [i["InstanceId"] for i in answer["Instances"]]
        self.launched(ids, hours_ago)
        return ids

    def launched(self, ids: list[str], hours_ago: float) -> None:
        """Set LaunchTime, which the API cannot: in moto's backend, in this process."""
        backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
        when = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=hours_ago)
        for i in ids:
            backend.get_instance(i).launch_time = when

    def group(self, name: str, cluster: str, desired: int, *, env: str = "default") -> list[str]:
        """An autoscaling group tagged as the stack tags it (propagated to its instances), with
        `desired` instances InService; returns their ids."""
        if not self.ec2.describe_launch_templates(
            Filters=[{"Name": "launch-template-name", "Values": ["rackform-nodes"]}]
        )["LaunchTemplates"]:
            self.ec2.create_launch_template(
                LaunchTemplateName="rackform-nodes",
                LaunchTemplateData={"ImageId": AMI, "InstanceType": "g6e.12xlarge"},
            )
        tags = {"rackform:cluster": cluster, "rackform:environment": env, "Name": name}
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": "rackform-nodes"},
            MinSize=0,
            MaxSize=4,
            DesiredCapacity=desired,
            AvailabilityZones=[f"{REGION}a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in tags.items()],
        )
        return [i["InstanceId"] for i in self.describe_group(name)["Instances"]]

    def states(self, ids: list[str]) -> dict[str, str]:
        answer = self.ec2.describe_instances(InstanceIds=ids)
        return {
            i["InstanceId"]: i["State"]["Name"]
            for r in answer["Reservations"]
            for i in r["Instances"]
        }

    def describe_group(self, name: str) -> dict:
        return self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
            "AutoScalingGroups"
        ][0]

    def tags(self, resource_id: str) -> dict[str, str]:
        answer = self.ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [resource_id]}])
        return {t["Key"]: t["Value"] for t in answer["Tags"]}
