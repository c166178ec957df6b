"""What a node does on AWS: reads its instance id from IMDSv2, and through boto3 in its virtualenv
tags itself configured, sends its launch hook's heartbeat and completes the hook; the heartbeat
sent every so often while a long block runs."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable

from rackform.boot.node.log import log, run
from rackform.boot.node.redirects import urlopen
from rackform.boot.node.virtualenv import VENV

IMDS = "http://169.254.169.254/latest"


def imds(path: str) -> str:
    """IMDSv2 (the launch template requires tokens)."""
    token_req = urllib.request.Request(
        f"{IMDS}/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
    )
    token = urlopen(token_req, timeout=5).read().decode()
    req = urllib.request.Request(
        f"{IMDS}/meta-data/{path}", headers={"X-aws-ec2-metadata-token": token}
    )
    return urlopen(req, timeout=5).read().decode()


# The AWS calls a joining node makes, through boto3 in the virtualenv with the instance
# profile's credentials (the stack's node policy allows each).
AWS_PROGRAM = """\
import boto3, sys
action, region, iid, asg, hook, sha = sys.argv[1:7]
if action == 'tag':
    boto3.client('ec2', region_name=region).create_tags(
        Resources=[iid], Tags=[{'Key': 'rackform:configured', 'Value': sha}])
elif action == 'heartbeat':
    boto3.client('autoscaling', region_name=region).record_lifecycle_action_heartbeat(
        LifecycleHookName=hook, AutoScalingGroupName=asg, InstanceId=iid)
else:
    boto3.client('autoscaling', region_name=region).complete_lifecycle_action(
        LifecycleHookName=hook, AutoScalingGroupName=asg, InstanceId=iid,
        LifecycleActionResult=action)
"""


def aws_caller(aws: dict, sha: str, instance_id: Callable[[], str] = lambda: imds("instance-id")):
    """`call(action)` for action tag | heartbeat | CONTINUE | ABANDON."""
    iid: list[str] = []

    def call(action: str) -> None:
        if not iid:
            iid.append(instance_id())
        argv = [action, aws["region"], iid[0], aws.get("asg", ""), aws.get("hook", ""), sha]
        run([str(VENV / "bin" / "python"), "-c", AWS_PROGRAM, *argv])

    return call


class Heartbeat:
    """Calls `send` every `interval_s` seconds while the block runs (the first call one
    interval after the start); a failed call is logged and the next one still comes."""

    def __init__(self, send: Callable[[], None] | None, interval_s: float):
        self.send, self.interval_s = send, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.send()  # type: ignore[misc]
            except Exception as exc:  # one failed heartbeat must not end the bootstrap
                log(f"lifecycle heartbeat failed: {exc}")

    def __enter__(self) -> Heartbeat:
        if self.send is not None and self.interval_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
