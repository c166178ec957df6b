"""What the stub target adds to compile: one node group per group as written, priced at the
target's flat rate; Ansible logs in as `stub`, the stack config carries the rate, and `rackform
init` starts from `init/training.yaml` beside this module."""

from __future__ import annotations

from rackform.plan.arrays import array_plan
from rackform.plan.model import NodeGroupPlan
from rackform.plan.pricing import Line, TargetCost
from rackform.plan.targets.compile import TargetCompiler


class StubCompiler(TargetCompiler):
    type = "stub"
    owned = False
    nodes_listed = False
    label = "the stub cloud"
    init_notes = "The stub's machines need no credentials."
    after_up = "`rackform configure {{blueprint}} --env {{env}}` reruns the roles on the stub."

    def ssh_user(self, target):
        return "stub"

    def stack_config(self, target):
        return {"stub:rate": str(target.usd_per_node_hour)}

    def compile_group(self, bp, group, catalog):
        return NodeGroupPlan(
            name=group.name,
            count=group.count or 0,
            gpu=catalog.gpu(group.gpu) if group.gpu else None,
            gpus_per_node=group.gpus_per_node or 0,
            instance=None,
            hosts=(),
            min_count=None,
            max_count=None,
            efa_interfaces=0,
            array=array_plan(bp.storage.checkpoint, drives=None),
        )

    def cost(self, plan):
        rate = plan.target.usd_per_node_hour
        hours = plan.figures.cost.hours_per_month.value
        lines = (
            Line(
                f"{plan.nodes} stub machines",
                plan.nodes * rate,
                plan.nodes * rate * hours,
                "target",
            ),
        )
        return TargetCost("stub", lines, None, ())


COMPILER = StubCompiler()
