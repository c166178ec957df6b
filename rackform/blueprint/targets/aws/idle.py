"""What `rackform reap` may do to an idle AWS cluster, and the rules that keep each action from
fighting the next `pulumi up`.

- `destroy`: the whole stack, through the Pulumi Automation API (rackform.stack.workspace).
- `stop` (training): EC2 StopInstances on the cluster's instances. `instance_state` is an
  output of the provider's `aws:ec2/instance:Instance`, never an input (the stack gives it
  none: the training node's `NodeInstance`), so the next `pulumi up` shows no change and
  leaves them stopped; start them again from the console or `aws ec2 start-instances`. Their
  instance-store drives (the checkpoint array) are wiped by the stop, so the next
  `rackform configure` builds the array again.
- `scale-to-zero` (inference): desired capacity 0 on each autoscaling group. The stack ignores
  changes to desired capacity (the autoscaler owns it), so only a group whose min_count is 0 can
  go to zero without the next `up` raising it again: the schema asks for min_count: 0.
"""

from __future__ import annotations

from rackform.blueprint.schema.base import Violation
from rackform.blueprint.targets.schema import Cluster

ACTIONS = {
    "training": ("notify", "destroy", "stop"),
    "inference": ("notify", "destroy", "scale-to-zero"),
}


def idle_rules(bp: Cluster) -> list[Violation]:
    idle = bp.lifecycle.idle
    if idle is None or idle.action != "scale-to-zero" or bp.purpose != "inference":
        return []
    return [
        Violation(
            ("node_groups", i, "min_count"),
            f"scale-to-zero needs min_count: 0 on node group {g.name!r} (the next `up` would "
            "scale it back to its minimum)",
            "set min_count: 0, or use action: notify or destroy",
        )
        for i, g in enumerate(bp.node_groups)
        if g.min_count != 0
    ]
