"""The scheduler compiled (`rackform.plan.slurm` holds what the plan carries): Slurm's nodes
with their GPUs, partitions with their nodes, the switches jobs are packed onto, preemption and
the jobs' checkpoint path; and the `slurm` role's variables made from it. Pure: from the
blueprint's `scheduler:` section and the compiled node groups."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rackform.blueprint.schema.fairness import Fairness
from rackform.blueprint.schema.scheduler import SlurmScheduler
from rackform.plan.fabric import TopologyPlan
from rackform.plan.model import NodeGroupPlan
from rackform.plan.slurm import (
    AccountPlan,
    ControllerInstance,
    FairnessPlan,
    PartitionPlan,
    QosPlan,
    SchedulerPlan,
    SlurmNode,
    Switch,
)
from rackform.plan.slurm_topology import placement, topology_conf, topology_yaml

# Hosts listed in no rack share one leaf switch: the blueprint says nothing that would split them.
UNRACKED_SWITCH = "cluster"
ROOT_SWITCH = "root"


def gres_type(gpu_key: str) -> str:
    """A catalog GPU model as a Slurm GRES type name (letters, digits and underscores)."""
    return re.sub(r"[^a-z0-9]+", "_", gpu_key.lower()).strip("_")


def compile_scheduler(
    spec: SlurmScheduler | None,
    groups: Sequence[NodeGroupPlan],
    checkpoint_dir: str,
    names: Mapping[str, Sequence[str]] | None = None,
    instance: ControllerInstance | None = None,
    topology: TopologyPlan | None = None,
) -> SchedulerPlan | None:
    """`names`: each node group's node names as the inventory will hold them (default: its
    listed hosts'; the AWS compiler names the instances its stack will create). `instance`: the
    controller a stack creates (AWS), else the controller is the blueprint's host. `topology`:
    the plan's; where the blueprint declares one, topology.conf is written from it
    (`slurm_topology.topology_conf`) and the smoke job placed within it."""
    if spec is None:
        return None
    members = {
        g.name: tuple((names or {}).get(g.name, tuple(h.name for h in g.hosts))) for g in groups
    }
    nodes = tuple(
        SlurmNode(
            n,
            g.name,
            g.gpus_per_node if g.has_gpus else 0,
            gres_type(g.gpu_key) if g.has_gpus and g.gpu_key else None,
        )
        for g in groups
        for n in members[g.name]
    )
    partitions = tuple(
        PartitionPlan(
            p.name,
            tuple(n for name in p.node_groups for n in members.get(name, ())),
            p.default,
            p.priority_tier,
            p.preemptible,
            p.max_time_min,
        )
        for p in spec.partitions
    )
    return SchedulerPlan(
        type=spec.type,
        controller=instance.name if instance else spec.controller or "",
        nodes=nodes,
        partitions=partitions,
        switches=topology.switches if topology else switches(groups, members),
        preempt_mode=spec.preemption.mode,
        grace_s=spec.preemption.grace_s,
        checkpoint_dir=checkpoint_dir,
        instance=instance,
        fairness=compile_fairness(spec.fairness),
        topology=topology_conf(topology) if topology and topology.declared else None,
        topology_yaml=topology_yaml(topology) if topology and topology.declared else "",
        placement=placement(topology, [n.name for n in nodes]) if topology else (),
    )


def compile_fairness(f: Fairness | None) -> FairnessPlan | None:
    if f is None:
        return None
    declared = [q.name for q in f.qos]
    return FairnessPlan(
        accounts=tuple(
            AccountPlan(
                a.name,
                a.share,
                a.users,
                a.allowed_qos(declared),
                a.default(declared),
                a.max_gpus,
            )
            for a in f.accounts
        ),
        qos=tuple(
            QosPlan(q.name, q.priority, q.max_gpus, q.max_gpus_per_user, q.max_gpus_per_account)
            for q in f.qos
        ),
        half_life_days=f.half_life_days,
        fairshare_weight=f.fairshare_weight,
        qos_weight=f.qos_weight,
    )


def switches(
    groups: Sequence[NodeGroupPlan], members: Mapping[str, Sequence[str]]
) -> tuple[Switch, ...]:
    """One leaf switch per rack (hosts in none share one, as do a stack's instances, which
    share a cluster placement group), and a root above several leaves, so Slurm packs a job onto
    as few racks as it can."""
    racks = {h.name: h.rack for g in groups for h in g.hosts}
    leaves: dict[str, list[str]] = {}
    for g in groups:
        for n in members[g.name]:
            rack = racks.get(n)
            leaves.setdefault(f"rack-{rack}" if rack else UNRACKED_SWITCH, []).append(n)
    out = tuple(Switch(name, tuple(nodes)) for name, nodes in leaves.items())
    if len(out) > 1:
        out += (Switch(ROOT_SWITCH, switches=tuple(s.name for s in out)),)
    return out


def slurm_vars(s: SchedulerPlan | None, interface: str) -> dict[str, Any]:
    """The slurm role's variables (as its argument specs declare them): none but
    `slurm_enabled: false` without a scheduler, so the site playbook skips the role."""
    if s is None:
        return {"slurm_enabled": False}
    return {
        "slurm_enabled": True,
        "slurm_controller": s.controller,
        # False: the controller is an instance of its own (AWS), which runs slurmctld only.
        "slurm_controller_is_node": s.controller_is_node,
        "slurm_nodes": [
            {"name": n.name, "gpus": n.gpus, "gpu_type": n.gpu_type or ""} for n in s.nodes
        ],
        "slurm_partitions": [
            {
                "name": p.name,
                "nodes": list(p.nodes),
                "default": p.default,
                "priority_tier": p.priority_tier,
                "preemptible": p.preemptible,
                "max_time_min": p.max_time_min or 0,
            }
            for p in s.partitions
        ],
        "slurm_switches": [
            {"name": w.name, "nodes": list(w.nodes), "switches": list(w.switches)}
            for w in s.switches
        ],
        # Where the blueprint declares a topology: topology.conf as one function writes it
        # (block or tree) and its plugin; else the role writes one leaf per rack from the
        # switches, as it always has.
        **(
            {"slurm_topology_plugin": s.topology.plugin, "slurm_topology_conf": s.topology.text}
            if s.topology
            else {}
        ),
        # And topology.yaml where both the blocks and the tree matter: the role writes it where
        # the node's Slurm reads it (25.05 and later), topology.conf stays for older ones.
        **({"slurm_topology_yaml": s.topology_yaml} if s.topology_yaml else {}),
        "slurm_preempt_mode": s.preempt_mode,
        "slurm_grace_time_s": s.grace_s,
        "slurm_checkpoint_dir": s.checkpoint_dir,
        **fairness_vars(s.fairness),
        # slurmd's address for the controller and the other nodes: on the fabric's first
        # interface, as the smoke job's rendezvous (empty: the default IPv4 address).
        "slurm_interface": interface,
        # The smoke job runs through Slurm (one job over every node, submitted from the
        # controller, the nodes' GPUs as GRES) where one job can ask every node for the same.
        **smoke_vars(s),
        **resumable_vars(s),
    }


def fairness_vars(f: FairnessPlan | None) -> dict[str, Any]:
    """Accounting (slurmdbd on the controller), fairshare and QOS; off: no slurmdbd, and
    slurm.conf as it was before the blueprint had fairness."""
    if f is None:
        return {"slurm_accounting": False}
    return {
        "slurm_accounting": True,
        "slurm_qos": [
            {
                "name": q.name,
                "priority": q.priority,
                "max_gpus": q.max_gpus or 0,
                "max_gpus_per_user": q.max_gpus_per_user or 0,
                "max_gpus_per_account": q.max_gpus_per_account or 0,
            }
            for q in f.qos
        ],
        "slurm_accounts": [
            {
                "name": a.name,
                "share": a.share,
                "users": list(a.users),
                "qos": list(a.qos),
                "default_qos": a.default_qos,
                "max_gpus": a.max_gpus or 0,
            }
            for a in f.accounts
        ],
        "slurm_fairshare_weight": f.fairshare_weight,
        "slurm_qos_weight": f.qos_weight,
        "slurm_half_life_days": f.half_life_days,
    }


def every_node_gres(s: SchedulerPlan) -> str | None:
    """What one job over every node asks each for (`gpu:h100_sxm:8`; "" for nodes without
    GPUs), or None where the nodes differ and one job cannot ask them all for the same."""
    kinds = {(n.gpu_type, n.gpus) for n in s.nodes}
    if len(kinds) != 1:
        return None
    gpu_type, gpus = kinds.pop()
    return f"gpu:{gpu_type}:{gpus}" if gpus and gpu_type else ""


def smoke_vars(s: SchedulerPlan) -> dict[str, Any]:
    """The smoke_train role's Slurm variables. One job asks every node for the same GRES, so
    it needs every node to have the same GPUs (`gpu:h100_sxm:8`, or none); a cluster whose
    node groups differ runs the smoke job without Slurm, each node with its own GPUs."""
    gres = every_node_gres(s)
    if gres is None:
        return {"smoke_train_slurm": False}
    return {
        "smoke_train_slurm": True,
        "smoke_train_slurm_submit_host": s.controller,
        "smoke_train_slurm_gres": gres,
        # Within one NVLink domain (--segment) or under one leaf (--switches=1) where it fits.
        **({"smoke_train_slurm_placement": list(s.placement)} if s.placement else {}),
    }


def resumable_sbatch(s: SchedulerPlan) -> list[str]:
    """sbatch's options for the resumable job (validators.resumable) over every node, as the
    slurm role's batch script gives them: one task a node, each node whole, requeued when
    preempted (its output appended across runs), the nodes' GPUs as GRES, and the smoke job's
    placement (`slurm_topology.placement` over the same nodes: `--segment=N` or
    `--switches=1`). None where one job cannot ask every node for the same GRES."""
    gres = every_node_gres(s)
    if gres is None or not s.nodes:
        return []
    return [
        f"--nodes={len(s.nodes)}",
        "--ntasks-per-node=1",
        "--exclusive",
        "--mem=0",
        "--requeue",
        "--open-mode=append",
        *([f"--gres={gres}"] if gres else []),
        *s.placement,
    ]


def resumable_vars(s: SchedulerPlan) -> dict[str, Any]:
    """The slurm role's `slurm_resumable_sbatch`, where the blueprint declares a topology (the
    plan then has a placement to give it; elsewhere the role writes no script and the cluster's
    variables stay as they were)."""
    if not s.placement:
        return {}
    return {"slurm_resumable_sbatch": resumable_sbatch(s)}
