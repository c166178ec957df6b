"""The Ansible side of the plan: the inventory and the roles' variables, built once by compile
(`Plan.inventory`, `Plan.group_vars`), and the inventory with the nodes a stack created (AWS)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rackform.blueprint.schema import names
from rackform.blueprint.schema.sections import WorkloadSpec
from rackform.catalog.raid import role_table
from rackform.catalog.systems import load_systems
from rackform.plan.expectations import Expectations
from rackform.plan.model import Basis, HostPlan, Plan, thaw
from rackform.plan.scheduler import slurm_vars
from rackform.plan.shared import shared_vars

# (name, address, port) of a node that exists, or (name, address, port, instance id) of one a
# stack created (AWS: the id is what the controller's SSH tunnel names).
Node = tuple[str, str, int] | tuple[str, str, int, str]

# Role variables that say how to check a cluster, not what to install on it: a change to them
# (smoke steps, thresholds, the blueprint's digest) reruns validation on request only and never
# configuration (`configure_vars`).
VALIDATION_ONLY = (
    "rackform_digest",
    "smoke_train_steps",
    "smoke_train_job_args",
    "smoke_train_host_args",
)


def group_name(node_group: str) -> str:
    return "ng_" + node_group.replace("-", "_")


def access_vars(plan: Basis) -> dict[str, Any]:
    """How Ansible reaches every node, before the target adds its own (e.g. an SSH tunnel).
    Every role acts as root: a login user other than root becomes root (sudo) on every target."""
    become = {"ansible_become": True} if plan.ssh_user != "root" else {}
    return {
        "ansible_user": plan.ssh_user,
        "ansible_python_interpreter": "/usr/bin/python3",
        **become,
    }


# The inventory group of Slurm's controller where it is no node (AWS: an instance the stack
# creates, `Plan.scheduler.instance`); empty otherwise (on bare metal and colocation the
# controller is one of the nodes). site.yml runs the slurm role over it and gpu_nodes together,
# and nothing else: it is never in gpu_nodes, so no GPU role, smoke job or validation counts it.
SLURM_CONTROLLER_GROUP = "slurm_controller"


def host_vars(host: HostPlan) -> dict[str, Any]:
    """A listed host's own variables: its rack, its NVMe drives where the blueprint names them
    (the inventory's host entry; a node that configures itself at boot gets them in its user
    data from the boot controller)."""
    out: dict[str, Any] = {}
    if host.rack:
        out["rack"] = host.rack
    if host.nvme:
        out["nvme_raid_devices"] = list(host.nvme)
    return out


def imex_members(plan: Basis) -> dict[str, tuple[str, ...]]:
    """Each compute tray of a rack-scale NVLink domain (a domain that spans nodes, of a system
    whose trays share memory through NVIDIA's IMEX) -> its domain's addresses, in the domain's
    order, the same list on every tray: the imex role's `imex_domain_members` (nodes_config.cfg)
    and the host checks' `--imex-members`. Only for listed hosts, whose addresses the plan holds;
    a domain with a tray of no known address gets none (the role then skips it, saying why)."""
    systems = load_systems()
    address = {h.name: h.address for g in plan.node_groups for h in g.hosts}
    out: dict[str, tuple[str, ...]] = {}
    for d in plan.topology.domains:
        system = systems.get(d.system) if d.system else None
        if not d.spans_nodes or (system is not None and not system.imex):
            continue
        if all(n in address for n in d.nodes):
            out.update(dict.fromkeys(d.nodes, tuple(address[n] for n in d.nodes)))
    return out


def build_inventory(
    plan: Basis,
    variables: Mapping[str, Any],
    hosts: Mapping[str, Sequence[Node]] | None = None,
    controller: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The YAML inventory: every node in `gpu_nodes`, each node group its own child group, and
    `variables` for all of them. `hosts` maps node-group name -> nodes; bare-metal and
    colocation hosts come from the plan, AWS nodes only once the stack has created them (an
    empty group until then). `controller`: Slurm's controller instance the stack created
    ([name, address, port, instance id]), the one host of `slurm_controller`. What a stack
    (or EC2) reports goes to ssh through Ansible, which puts the host last on ssh's command line
    with no `--` before it: each node is checked first (`reported`; UnsafeValue where one is
    not what it should be)."""
    children: dict[str, Any] = {}
    members = imex_members(plan)
    for g in plan.node_groups:
        given = (hosts or {}).get(g.name, [])
        nodes = [reported(n, f"the stack's node group {g.name}") for n in given] or [
            (h.name, h.address, h.port) for h in g.hosts
        ]
        by_name = {h.name: h for h in g.hosts}
        entries: dict[str, Any] = {}
        for name, address, port, *instance in nodes:
            entry: dict[str, Any] = {"ansible_host": address, "ansible_port": port}
            if instance:
                entry["rackform_instance_id"] = instance[0]
            host = by_name.get(name)
            if host is not None:
                entry.update(host_vars(host))
            if name in members:
                entry["imex_domain_members"] = list(members[name])
            entries[name] = entry
        children[group_name(g.name)] = {"hosts": entries}
    ctl: dict[str, Any] = {}
    if controller:
        name, address, port, *instance = reported(controller, "the stack's Slurm controller")
        ctl[name] = {"ansible_host": address, "ansible_port": port}
        if instance:
            ctl[name]["rackform_instance_id"] = instance[0]
    return {
        "all": {
            "vars": dict(variables),
            "children": {
                "gpu_nodes": {"children": children},
                SLURM_CONTROLLER_GROUP: {"hosts": ctl},
            },
        }
    }


def reported(node: Sequence[Any], source: str) -> Sequence[Any]:
    """A node as a stack or its target's API reports it ([name, address, port] or [name,
    address, port, machine id]), checked: a host name, an IP address, a port and an id of
    letters, digits, '.', '_' and '-', so none of them reaches ssh's command line (Ansible's
    `ansible_host`, a tunnel's ProxyCommand) as an option or as shell code. UnsafeValue names
    the value and `source`."""
    name, address, port, *instance = node
    at = f"{source} ({name!r})"
    names.node_name(name, source)
    names.node_address(address, at)
    names.port(port, at)
    for i in instance[:1]:
        names.machine_id(i, at)
    return node


def inventory(
    plan: Plan,
    hosts: Mapping[str, Sequence[Node]] | None = None,
    controller: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The compiled plan's inventory (its variables, the target's included), with `hosts` in
    place of the plan's own where given."""
    return build_inventory(plan, thaw(plan.inventory["all"]["vars"]), hosts, controller)


def with_nodes(
    plan: Plan,
    nodes: Mapping[str, Sequence[Sequence[Any]]],
    controller: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The plan's inventory with the nodes a stack created ({group: [[name, address, port]]});
    a group the stack names no node of keeps the plan's hosts. `controller`: Slurm's controller
    instance the stack created ([name, address, port, instance id]), if it made one."""
    return inventory(plan, {g: [tuple(n) for n in ns] for g, ns in nodes.items()}, controller)


def inventory_hosts(inv: Mapping[str, Any]) -> list[str]:
    """Every node's host name of an inventory, sorted: the nodes of `gpu_nodes`, never Slurm's
    controller instance (`slurm_controller`), which is no node."""
    groups = inv["all"]["children"]["gpu_nodes"]["children"]
    return sorted(h for g in groups.values() for h in (g.get("hosts") or {}))


def host_groups(inv: Mapping[str, Any], names: Iterable[str]) -> dict[str, str]:
    """Each node's node group as the blueprint names it (`names`: the node groups'), by host
    name, from the inventory's `ng_<group>` children (whose names lose the group's hyphens)."""
    named = {group_name(n): n for n in names}
    groups = inv["all"]["children"]["gpu_nodes"]["children"]
    return {h: named.get(g, g) for g, v in groups.items() for h in (v.get("hosts") or {})}


def group_vars(plan: Basis, expectations: Expectations | None) -> dict[str, Any]:
    """Role variables for every node, named `<role>_<var>` (see each role's argument_specs);
    `expectations`: the cluster-wide smoke run's (`Plan.expectations`)."""
    gpus = [g.gpu for g in plan.node_groups if g.gpu and g.gpus_per_node]
    net, ckpt, sw = plan.network, plan.checkpoint, plan.software
    return {
        "rackform_cluster": plan.name,
        "rackform_environment": plan.environment,
        "rackform_purpose": plan.purpose,
        "rackform_digest": plan.digest,
        "nvidia_driver_branch": sw.driver_branch,
        "nvidia_driver_cuda_version": sw.cuda,
        "nvidia_driver_require_gpu": bool(gpus),
        "nvidia_driver_fabric_manager": any(g.nvswitch for g in gpus),
        "nccl_rdma_fabric": net.fabric,
        "nccl_rdma_hcas": list(net.hcas),
        "nccl_rdma_interfaces": list(net.interfaces),
        "nccl_rdma_nccl_version": sw.nccl,
        "nccl_rdma_cuda_version": sw.cuda,
        "nvme_raid_level": ckpt.raid_level,
        # The catalog's RAID table (fewest drives, data drives), the one preflight reads.
        "nvme_raid_levels": role_table(),
        "nvme_raid_mount": ckpt.mount,
        "nvme_raid_filesystem": ckpt.filesystem,
        "nvme_raid_devices": list(ckpt.devices),
        "nvme_raid_allow_wipe": ckpt.allow_wipe,
        "dcgm_version": sw.dcgm,
        "dcgm_cuda_version": sw.cuda,
        # DCGM watches GPUs: hosts of a CPU-only cluster (the testbed) skip it, saying why.
        "dcgm_require_gpu": bool(gpus),
        "dcgm_diag_level": plan.validation.dcgm_diag_level,
        "smoke_train_steps": plan.validation.smoke_steps,
        "smoke_train_torch_version": sw.torch,
        "smoke_train_checkpoint_dir": ckpt.mount,
        # The job's rendezvous uses the first node's address on the fabric's first interface.
        "smoke_train_interface": net.interfaces[0] if net.interfaces else "",
        **_smoke_expectations(expectations),
        **slurm_vars(plan.scheduler, net.interfaces[0] if net.interfaces else ""),
        # Slurm's health check between jobs expects what the host checks expect of the GPUs.
        **(
            {"slurm_health_check_args": expectations.gpu_args() if expectations else []}
            if plan.scheduler
            else {}
        ),
        **shared_vars(plan.shared, net.interfaces[0] if net.interfaces else ""),
        **(_tier_vars(plan) if plan.scheduler else {}),
    }


def _tier_vars(plan: Basis) -> dict[str, Any]:
    """What the Slurm prolog gives every job: its place on the checkpoint tier
    (`<tier>/<job id>`), how many checkpoints it keeps (the workload's, which sizes the array and
    prices the tier), the endpoint of an S3-compatible store, and the fewest nodes an elastic job
    goes on with."""
    keep = (
        plan.workload.checkpoints_retained
        if plan.workload
        else WorkloadSpec.model_fields["checkpoints_retained"].default
    )
    return {
        "slurm_checkpoint_tier": plan.checkpoint_tier or "",
        "slurm_checkpoint_keep": keep,
        "slurm_checkpoint_tier_endpoint": plan.tier_endpoint or "",
        # Elastic training's floor (workload.min_nodes; 0: none), as $RACKFORM_MIN_NODES.
        "slurm_min_nodes": (plan.workload.min_nodes if plan.workload else None) or 0,
    }


def configure_vars(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The role variables of a configuration run (the Pulumi Configure stage, a node's own
    bootstrap): what to install, without how to check it; smoke_train prepares its environment
    but runs no job (validation does)."""
    out = {k: v for k, v in variables.items() if k not in VALIDATION_ONLY}
    return {**out, "smoke_train_run": False}


def _smoke_expectations(exp: Expectations | None) -> dict[str, Any]:
    """The smoke job's and host checks' expectations (`thresholds.for_group`), the parts
    of their command lines (`acceptance.argv`) that come from the blueprint. The role
    puts the run's own in front (--expect-nodes from the nodes actually in the run). A cluster
    of several node groups gets none: one job across different groups has no single set of
    expectations."""
    if exp is None:
        return {"smoke_train_job_args": [], "smoke_train_host_args": []}
    return {"smoke_train_job_args": exp.threshold_args(), "smoke_train_host_args": exp.host_args()}
