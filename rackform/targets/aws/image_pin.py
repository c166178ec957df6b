"""The machine image a cluster's nodes run, pinned in the stack at the first `up`.

Without an explicit `ami.id`, the program looks up the newest image of the blueprint's kind on
every run (`aws.ec2.get_ami`). A newer image of the same kind must not replace running nodes,
and a different kind (ubuntu-22.04 -> a DLAMI) must: the roles configure a node for the kind
the blueprint names. `ImagePin` holds both: its `image` input is the kind (or the explicit
id), its `image_id` output the image found when it was created. Its `diff` replaces it only
when the kind changes; otherwise the step is a "same" step, for which the Pulumi engine keeps
the resource's recorded outputs (Pulumi docs, "Dynamic Resource Providers": `diff` returning
no changes leaves the resource as it is), so the launch template keeps the pinned image. No
cloud call happens here: the lookup is the program's own invoke, under Pulumi's mocks too.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

from rackform.plan.targets.aws.replaces import PIN_IDENTITY


class ImagePinProvider(ResourceProvider):
    serialize_as_secret_always = False

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(
            f"image-{props['image']}", {"image": props["image"], "image_id": props["image_id"]}
        )

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in PIN_IDENTITY if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces), replaces=replaces, stables=[])


class ImagePin(pulumi.dynamic.Resource, module="rackform", name="ImagePin"):
    image_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        image: str,
        lookup: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`image`: the blueprint's image kind, or its explicit AMI id; `lookup`: the id the
        program found for it on this run (kept only when the pin is created)."""
        super().__init__(ImagePinProvider(), name, {"image": image, "image_id": lookup}, opts)
