"""Compile and price what bare metal and colocation share: node groups of listed hosts, reached
over SSH as the blueprint's `ssh_user`, each registered (never created or wiped), and hardware
amortized over its life."""

from __future__ import annotations

from rackform.blueprint.schema.model import Blueprint, NodeGroup
from rackform.catalog import Catalog
from rackform.plan.arrays import array_plan
from rackform.plan.model import Basis, HostPlan, NodeGroupPlan
from rackform.plan.pricing import UNPRICED, Line
from rackform.plan.targets.compile import TargetCompiler
from rackform.plan.targets.onprem import replaces


def compile_group(bp: Blueprint, group: NodeGroup, catalog: Catalog) -> NodeGroupPlan:
    ckpt = bp.storage.checkpoint
    hosts = tuple(
        HostPlan(
            h.name, h.address, h.port or bp.target.ssh_port, h.rack, tuple(h.nvme or ckpt.devices)
        )
        for h in group.hosts
    )
    # Drives are known where every host lists them (its own `nvme`, or storage's `devices`);
    # otherwise the nvme_raid role finds them on the host.
    listed = [len(h.nvme) for h in hosts]
    drives = min(listed) if listed and all(listed) else None
    return NodeGroupPlan(
        name=group.name,
        count=len(hosts),
        gpu=catalog.gpu(group.gpu) if group.gpu else None,
        gpus_per_node=group.gpus_per_node or 0,
        instance=None,
        hosts=hosts,
        min_count=None,
        max_count=None,
        efa_interfaces=0,
        array=array_plan(ckpt, drives=drives),
    )


def hardware(plan: Basis, capex: float | None, months: int, notes: list[str]) -> list[Line]:
    """Hardware amortized over `months`, or a note that it cannot be priced."""
    hours = plan.figures.cost.hours_per_month.value
    if capex is None:
        notes.append(f"{UNPRICED}: no target.capex_usd_per_gpu, so hardware is not priced")
        return []
    gpus = sum(g.gpus for _, g in plan.gpu_groups)
    month = capex * gpus / months
    item = f"{gpus} GPUs x ${capex:,.0f} over {months} months"
    return [Line(item, month / hours, month, "target.capex_usd_per_gpu")]


class OnPremCompiler(TargetCompiler):
    """What bare metal and colocation share in compile: hosts listed in the blueprint, owned."""

    nodes_listed = True
    owned = True
    node_types = ("pulumi-python:dynamic/rackform:Host",)  # a listed host, registered
    init_notes = (
        "The hosts must exist and take SSH from this machine as `target.ssh_user` with a key (or "
        "agent): `up` registers them, runs the roles and then the smoke job."
    )
    after_up = "`rackform configure {{blueprint}} --env {{env}}` reruns the Ansible roles."

    def ssh_user(self, target) -> str:
        return target.ssh_user

    def replace_rules(self):
        return replaces.RULES

    def compile_group(self, bp: Blueprint, group: NodeGroup, catalog: Catalog) -> NodeGroupPlan:
        return compile_group(bp, group, catalog)
