"""`rackform image build FILE [--env ENV]`: build the cluster's node image (`image.bake`) now,
without touching the nodes: the stack's update limited to the resources that build it (on AWS
its EC2 Image Builder resources, rackform/targets/aws/node_image.py). The launch templates move
to the new image at the next `up`. A target that builds no image yet says so in one line."""

from __future__ import annotations

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, for_action, need, user_error
from rackform.cli.stack_cmd import operate
from rackform.targets.runtime import ImageNotBuilt
from rackform.targets.runtimes import runtime

image_app = typer.Typer(help="The cluster's baked node image.", no_args_is_help=True)
app.add_typer(image_app, name="image")


@image_app.command("build")
def build(file: File, env: Env = None) -> None:
    """Build the node image the blueprint bakes (image.bake), without replacing any node: the
    stack's update targeted at the image's resources. The nodes launch from it after the next
    `rackform up`."""
    plan = for_action(file, env, "nothing was built").plan
    try:
        targets = runtime(plan.target_type).node_image_targets(plan)
    except ImageNotBuilt as exc:
        raise user_error(str(exc)) from None
    need("pulumi", "image build")
    operate(plan, "up", targets=targets)
