"""Effective blueprint -> Plan. Pure: the same effective blueprint always compiles to the same
plan, and nothing here touches a cloud, a host or a disk. The target's compiler compiles its
node groups, what the target derives and its price, and says how Ansible and the stack reach it;
its schema names the fabrics it can have (the caller hands both over); everything else here is
the same for every target.

One pass, in data-path order: the basis (the blueprint's sections, the target's node groups and
racks), then each fact derived from it, once (sizing, expectations per node group, cost, the
inventory and the roles' variables), then the plan, complete and frozen."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

from rackform.blueprint.loader import Effective
from rackform.blueprint.targets.schema import TargetSchema
from rackform.catalog import load_catalog
from rackform.catalog.preflight import load_preflight_figures
from rackform.paths import shown_in_config
from rackform.plan.cost import estimate
from rackform.plan.decode import decode_bounds
from rackform.plan.interval import CheckpointInterval, FailureRate, Measured, interval
from rackform.plan.inventory import access_vars, build_inventory, group_vars
from rackform.plan.model import Basis, Plan, cluster_expectations, frozen, stack_name
from rackform.plan.scheduler import compile_scheduler, switches
from rackform.plan.serving_vars import serving_vars
from rackform.plan.sizing import Sizing, size
from rackform.plan.targets.compile import TargetCompiler
from rackform.plan.thresholds import for_group
from rackform.plan.topology import compile_topology


def idle_policy_tag(effective: Effective) -> str:
    """The idle policy as a tag value, e.g. `util-below=10/for=120m/action=destroy`. Written
    only with characters every AWS service accepts in a tag value (letters, digits, spaces and
    _ . : / = + - @; IAM refuses the rest), so one value serves every resource."""
    idle = effective.blueprint.lifecycle.idle
    if idle is None:
        return "none"
    return f"util-below={idle.gpu_util_below_pct:g}/for={idle.for_minutes}m/action={idle.action}"


def stack_config(
    effective: Effective, compiler: TargetCompiler, project: Path | None
) -> dict[str, str]:
    """`Pulumi.<stack>.yaml`'s config: the blueprint (relative to the Pulumi project when inside
    it, which is how the program resolves it), the environment, and what the target's provider
    needs."""
    bp = effective.blueprint
    return {
        "rackform:blueprint": shown_in_config(effective.path, project),
        "rackform:environment": effective.environment,
        **compiler.stack_config(bp.target),
    }


# A stack config key that is not the blueprint's: a new value asks the Validate stage to run
# again (`rackform up --revalidate`).
REVALIDATE = "rackform:revalidate"
# Another: `rackform up`'s wait for the nodes configured at boot, as the check the Validate stage
# adds to its report (`reports.recorded_value`; "" or absent: none).
BOOT_VERDICT = "rackform:boot"
# Two more, of a data tier's stack only: "true" lifts its protection, for `rackform destroy
# --data`; and the pieces `rackform up` found in the cloud that the stack's state lacks, to import
# (JSON {logical name: {"id": ..., "name": ...}}, "" or absent: none).
RELEASE = "rackform:release"
ADOPT = "rackform:adopt"


def compile_plan(
    effective: Effective,
    schema: TargetSchema,
    compiler: TargetCompiler,
    project: Path | None,
    siblings: tuple[Effective, ...] = (),
    measured: Measured | None = None,
) -> Plan:
    """`schema`, `compiler`: the blueprint's target's parts. `project`: the Pulumi project the
    stack runs in (None: none), `siblings` the blueprints beside this one, and `measured` what
    the cluster measured of itself (its checkpoint's blocking time, its failure rate), as the
    caller found them (compile reads no file)."""
    basis = compile_basis(effective, schema, compiler, project, siblings)
    sizing = sizing_of(basis)
    groups = ((g.name, g.gpu, g.gpus_per_node) for _, g in basis.gpu_groups)
    decode = decode_bounds(groups, sizing.serving, basis.figures.serving)
    cost = estimate(basis, compiler.cost(basis), sizing, decode)
    expectations = {g.name: for_group(basis, g.name) for g in basis.node_groups}
    # The target adds its own: how SSH reaches its nodes, what its machine image preinstalled.
    inv = build_inventory(basis, {**access_vars(basis), **compiler.inventory_vars(basis)})
    variables = {
        **group_vars(basis, cluster_expectations(expectations)),
        **serving_vars(basis, sizing.serving, decode, cost),
        **compiler.role_vars(basis),
    }
    return Plan(
        **{f.name: getattr(basis, f.name) for f in dataclasses.fields(Basis)},
        sizing=sizing,
        interval=interval_of(basis, sizing, measured or Measured()),
        cost=cost,
        group_expectations=MappingProxyType(expectations),
        inventory=frozen(inv),
        group_vars=frozen(variables),
        decode=decode,
    )


def compile_basis(
    effective: Effective,
    schema: TargetSchema,
    compiler: TargetCompiler,
    project: Path | None,
    siblings: tuple[Effective, ...],
) -> Basis:
    """What every derived fact is computed from: the blueprint's sections and what the
    target's compiler makes of its node groups and racks."""
    bp = effective.blueprint
    catalog = load_catalog()
    groups = tuple(compiler.compile_group(bp, g, catalog) for g in bp.node_groups)
    stack = stack_name(effective)
    target_plan, racks = compiler.compile_target(bp, groups, catalog)
    names = {g.name: compiler.node_names(stack, g) for g in groups}
    members = {g.name: tuple(names.get(g.name, tuple(h.name for h in g.hosts))) for g in groups}
    topology = compile_topology(
        bp.topology, bp.node_groups, groups, members, switches(groups, members)
    )
    tags = (
        ("rackform:cluster", bp.name),
        ("rackform:purpose", bp.purpose),
        ("rackform:environment", effective.environment),
        ("rackform:owner", bp.owner),
        ("rackform:idle-policy", idle_policy_tag(effective)),
        ("rackform:protect", "true" if bp.lifecycle.protect else "false"),
        ("rackform:digest", effective.digest),
    )
    return Basis(
        effective=effective,
        name=bp.name,
        environment=effective.environment,
        stack=stack,
        digest=effective.digest,
        purpose=bp.purpose,
        owner=bp.owner,
        target=bp.target,
        target_plan=target_plan,
        image_pin=frozen(compiler.image_pin(bp.target, target_plan)),
        node_groups=groups,
        racks=racks,
        network=bp.network,
        checkpoint=bp.storage.checkpoint,
        shared=bp.storage.shared,
        object_tier=bp.storage.object,
        software=bp.software,
        workload=bp.workload,
        validation=bp.validation,
        lifecycle=bp.lifecycle,
        image=bp.image,
        waivers=frozen({w.code: w.reason for w in bp.waivers}),
        tags=tags,
        ssh_user=compiler.ssh_user(bp.target),
        fabrics=schema.fabrics,
        nodes_listed=compiler.nodes_listed,
        owned=compiler.owned,
        on_demand=compiler.on_demand(bp.target),
        scheduler=compile_scheduler(
            bp.scheduler,
            groups,
            bp.storage.checkpoint.mount,
            names=names,
            instance=compiler.slurm_controller(bp, stack),
            topology=topology,
        ),
        topology=topology,
        directory=effective.path.parent,
        siblings=siblings,
        promoted_from=effective.promoted_from,
        stack_config=frozen(stack_config(effective, compiler, project)),
        project=project,
        figures=load_preflight_figures(),
        catalog=catalog,
        offers=compiler.offers(catalog, groups),
    )


def sizing_of(basis: Basis) -> Sizing:
    return size(
        basis.workload,
        training=basis.training,
        gpus=basis.gpus,
        gpu_nodes=basis.gpu_nodes,
        arrays=[g.array for g in basis.writing_groups],
        f=basis.figures.memory,
    )


def catalog_rate(basis: Basis) -> FailureRate:
    """The catalog's published failure rate, with its source."""
    f = basis.figures.failures
    return FailureRate(
        f.per_node_hour.value,
        f"catalog: {f.per_node_hour.source.key} ({f.per_node_hour.source.url})",
        f.hardware_share.value,
        f.software_share.value,
        f.network_share.value,
    )


def failure_rate(basis: Basis, measured: Measured) -> FailureRate:
    """The cluster's own rate where its audit log has enough node-hours in service, else the
    catalog's (`failures.min_node_hours`)."""
    own = measured.failures
    floor = basis.figures.failures.min_node_hours.value
    if own is not None and own.node_hours is not None and own.node_hours >= floor:
        return own
    return catalog_rate(basis)


def _staging_s(basis: Basis, size_gb: float, writers: int) -> tuple[float, str] | None:
    """An asynchronous checkpoint's blocking part: each GPU's shard (a writing node's share
    over its GPUs) copied to host memory over PCIe x16 at the slowest GPU's generation."""
    table = basis.figures.checkpoint.pcie_x16_gbps.value
    gens = [
        int(g.gpu.pcie_gen.value)
        for _, g in basis.gpu_groups
        if g.gpu is not None and g.gpu.pcie_gen is not None
    ]
    if not gens or min(gens) not in table:
        return None
    gbps = float(table[min(gens)])
    per_gpu = size_gb / writers / max(g.gpus_per_node for _, g in basis.gpu_groups)
    return (
        per_gpu / gbps,
        f"asynchronous: a {per_gpu:.2g} GB shard per GPU to host memory at {gbps:g} GB/s (PCIe Gen{min(gens)} x16)",
    )


def interval_of(basis: Basis, sizing: Sizing, measured: Measured) -> CheckpointInterval | None:
    """A training plan's checkpoint interval against the best one. C: one synchronous
    checkpoint at the speed the cluster's last validation measured (the slowest node's write)
    where given, else at the tier's estimated speed (sizing); an asynchronous one blocks only
    for the shards' copy to host memory. R: the checkpoint read back at the same speed (NVMe
    arrays read at least as fast as they write)."""
    t, w = sizing.checkpoint, basis.workload
    if t is None or w is None:
        return None
    gbps, source = t.node_gbps, f"estimated: {t.size_gb:g} GB at {t.node_gbps:g} GB/s per node"
    if measured.checkpoint_gbps is not None:
        gbps, source = measured.checkpoint_gbps, measured.checkpoint_source
        source += f": {t.size_gb:g} GB at {gbps:g} GB/s per node"
    if t.writers > 1:
        source += f" x {t.writers} nodes"
    write_s = t.size_gb / (gbps * t.writers)
    c_s = write_s
    staging = _staging_s(basis, t.size_gb, t.writers) if w.checkpoint_async else None
    if staging is not None:
        c_s, source = staging
    nodes = basis.gpu_nodes or 1
    declared = None if w.checkpoint_interval_min is None else w.checkpoint_interval_min * 60
    rate = failure_rate(basis, measured)
    return interval(c_s, source, write_s, nodes, rate, declared, staging is not None)
