"""What the stub target adds to the running world: a component that creates one machine per
node, where its machines run now (the stub cloud, for the commands after `up`: host drift,
status, heal) and its reaper."""

from __future__ import annotations

import pulumi

from rackform.lifecycle.outcome import ActionError
from rackform.targets.runtime import TargetRuntime
from stub_target.compile import COMPILER


class StubNodes(pulumi.ComponentResource):
    def __init__(self, name, plan, opts=None):
        super().__init__("rackform:stub:Nodes", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.node_resources = []
        listed = {}
        flavors = {g.name: g.flavor for g in plan.effective.blueprint.node_groups}
        for g in plan.node_groups:
            listed[g.name] = []
            for i in range(g.count):
                host = f"{plan.stack}-{g.name}-{i}"
                props = {"flavor": flavors[g.name]}
                machine = pulumi.CustomResource("stub:index:Machine", host, props, child)
                self.node_resources.append(machine)
                listed[g.name].append([host, f"10.9.0.{len(self.node_resources)}", 22])
        self.nodes = pulumi.Output.from_input(listed)
        self.register_outputs({"nodes": self.nodes})


class StubRuntime(TargetRuntime):
    type = "stub"
    label = COMPILER.label

    def component(self, name, plan, opts, providers):
        return StubNodes(f"{name}-stub", plan, opts=opts)

    def nodes(self, plan):
        from stub_target import cloud

        c = cloud.cluster(plan.stack)
        if c is None:
            raise ActionError(f"the stub cloud has no cluster {plan.stack}")
        return c["machines"]

    def reaper(self):
        from stub_target.reap import StubReaper

        return StubReaper()


RUNTIME = StubRuntime()
