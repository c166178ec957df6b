"""What Prometheus says about each node of a cluster, as `rackform heal` evidence. Every series
is selected by the scrape labels the `dcgm` role writes (cluster, environment, purpose, node)
and aggregated by node and GPU, so a series whose other labels change (a new driver's version,
a re-addressed exporter) is still one GPU, and a gap in a series is a gap, never a zero.

Signals, each a few queries per cluster (never one per node):
- seen: a node with no GPU series in the last STALE_S is `unknown` (never acted on); a node
  without GPUs (a cluster of CPU nodes, the testbed's VMs), with no node_exporter series;
- gpu_missing: fewer GPUs reporting now than its node group has;
- xid: every non-zero XID code a GPU reported in the lookback window (dcgm-exporter keeps the
  last code in DCGM_FI_DEV_XID_ERRORS), each with NVIDIA's action or the policy's;
- memory: uncorrectable ECC errors that rose in the window, a pending or failed row remap;
- pcie: PCIe replays an hour above the policy's rate;
- throttling: thermal or power-brake clock throttling now (the throttle-reasons bitmask);
- storage: node_exporter's md array short of its required members (a failed or missing drive),
  or the checkpoint filesystem read-only;
- fabric: node_exporter's InfiniBand ports not ACTIVE, or their link-downed counter rising;
- heartbeat: the job's heartbeat stopped on this node while the job's other nodes go on;
- checks: Slurm's health check on the node fails some of the quick host checks (the slurm role
  writes them for node_exporter's textfile collector): the checkpoint mount a storage fault (a
  RAID0 array with a member gone, which md still calls active), any other a validation fault.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from rackform.blueprint.schema import names
from rackform.blueprint.schema.health import HealthPolicy
from rackform.health import xid
from rackform.health.verdict import Evidence, NodeHealth
from rackform.telemetry import labels as L
from rackform.telemetry.labels import Key
from rackform.telemetry.prometheus import Prometheus, Sample, TelemetryError

# A GPU with no sample this recent is not reporting (four scrapes at Prometheus's default 1m).
STALE_S = 300
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
# The clock event (throttle) reasons bitmask: DCGM 3.3 renamed the field; either is read.
THROTTLE = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
# NVML's clocks event reasons that mean cooling or power trouble, not the workload's own
# (nvmlClocksEventReasons: HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, power brake 0x80).
THROTTLE_BITS = {0x8: "HW slowdown", 0x20: "SW thermal", 0x40: "HW thermal", 0x80: "power brake"}
MD_REQUIRED, MD_DISKS, FS_READONLY = (
    "node_md_disks_required",
    "node_md_disks",
    "node_filesystem_readonly",
)
# 1 where node_exporter's statfs of the mount point failed (an I/O error under it, a dead
# array or a hung network mount): node_exporter's filesystem collector.
FS_DEVICE_ERROR = "node_filesystem_device_error"
IB_STATE, IB_LINK_DOWNED = "node_infiniband_state_id", "node_infiniband_link_downed_total"
IB_ACTIVE = 4  # the port state ACTIVE (node_exporter's infiniband collector: state_id)
# node_exporter's stat collector (on by default) exports it on every Linux host: a node
# without GPUs is seen by it.
NODE_SEEN = "node_boot_time_seconds"
# The slurm role's health check, through node_exporter's textfile collector: 1 per failed check.
CHECK_FAILED = "rackform_node_check_failed"
STORAGE_CHECKS = ("checkpoint_mount",)


def _sel(key: Key, **extra: str) -> str:
    match = {L.CLUSTER: key.cluster, L.ENVIRONMENT: key.environment, L.PURPOSE: key.purpose}
    return L.selector(**match, **extra)


def _current(series: str) -> str:
    """`series` (a selector) as of each target's last scrape: now where that scrape succeeded,
    and where it failed (`up` 0, and Prometheus marks every series of the target stale at once:
    an exporter timing out on a node with I/O trouble, a dropped connection) the values the
    target last gave within STALE_S. A failed scrape is a gap, never a fault cleared; a series
    a target that answers no longer gives (a check passing again, a mount gone) is gone. Matched
    on the target's `job` and `instance`, which Prometheus puts on every series it scrapes."""
    return f"({series} or (last_over_time({series}[{STALE_S}s]) and on (job, instance) (up == 0)))"


def _node(s: Sample | dict[str, str]) -> str:
    labels = s.labels if isinstance(s, Sample) else s
    return labels.get(L.NODE, "")


def read(
    prom: Prometheus,
    key: Key,
    groups: dict[str, tuple[str, int]],
    policy: HealthPolicy,
    at: float,
    checkpoint_mount: str | None = None,
    unlisted: tuple[str, int] | None = None,
) -> list[NodeHealth]:
    """Each node of the cluster (`groups`: node -> (its group, GPUs it has)) with its evidence,
    in the blueprint's order. Where the blueprint lists no nodes (`unlisted`: the group and GPUs
    such a node has), the nodes are those with GPU series in the lookback window, by name: a
    name heal then drains, reaches over SSH and hands Ansible, so a label that is no host name
    is refused (TelemetryError) rather than acted on."""
    sel = _sel(key)
    w = f"{policy.lookback_minutes}m"
    if unlisted is not None:
        found = prom.query(f"count by ({L.NODE}) (count_over_time({L.GPU_UTIL}{sel}[{w}]))", at)
        source = f"Prometheus ({L.GPU_UTIL}{sel}, label {L.NODE})"
        try:
            groups = {names.node_name(_node(s), source): unlisted for s in found}
        except names.UnsafeValue as exc:
            raise TelemetryError(str(exc)) from None
        groups = dict(sorted(groups.items()))
    nodes = {n: NodeHealth(n, g, seen=False) for n, (g, _) in groups.items()}

    def add(node: str, e: Evidence) -> None:
        if node in nodes:  # a node the blueprint does not have is not this run's business
            nodes[node].evidence.append(e)

    # Which GPUs report now (by node and GPU: relabelled series count once).
    reporting: dict[str, set[str]] = defaultdict(set)
    for s in prom.query(f"count by ({L.NODE}, {L.GPU}) ({L.GPU_UTIL}{sel})", at):
        reporting[_node(s)].add(s.labels.get(L.GPU, ""))
    for node, gpus in reporting.items():
        if node in nodes:
            nodes[node].seen = True
            want = groups[node][1]
            if 0 < len(gpus) < want:
                add(node, Evidence(
                    "gpu_missing",
                    f"{len(gpus)} of {want} GPUs report (GPUs {', '.join(sorted(gpus))})",
                    policy.actions.gpu_missing, L.GPU_UTIL, len(gpus), at,
                ))  # fmt: skip

    if any(g == 0 for _, g in groups.values()):
        seen = f"count by ({L.NODE}) (last_over_time({NODE_SEEN}{sel}[{STALE_S}s]))"
        for s in prom.query(seen, at):
            if _node(s) in nodes and groups[_node(s)][1] == 0:
                nodes[_node(s)].seen = True

    # Every non-zero XID code in the window, by GPU, with the last time each was seen.
    codes: dict[tuple[str, str, int], float] = {}
    xexpr = f"({L.XID_ERRORS}{sel} != 0)[{w}:1m]"
    for labels, points in prom.query_range(xexpr, at):
        for t, v in points:
            k = (_node(labels), labels.get(L.GPU, ""), int(float(v)))
            codes[k] = max(codes.get(k, 0.0), float(t))
    for (node, gpu, code), t in sorted(codes.items()):
        act, why = xid.action(code, policy.actions.xid)
        add(node, Evidence("xid", f"GPU {gpu}: {why}", act, L.XID_ERRORS, code, t, gpu))

    memory = (
        (f"increase({L.ECC_DBE}{sel}[{w}]) > 0", L.ECC_DBE, "uncorrectable ECC errors in the window"),
        (f"max_over_time({L.ROW_REMAP_PENDING}{sel}[{w}]) > 0", L.ROW_REMAP_PENDING,
         "a row remap pending (a GPU reset activates it)"),
        (f"max_over_time({ROW_REMAP_FAILURE}{sel}[{w}]) > 0", ROW_REMAP_FAILURE,
         "a row remap failed"),
    )  # fmt: skip
    for expr, series, what in memory:
        for s in _by_gpu(prom.query(expr, at)):
            gpu = s.labels.get(L.GPU, "")
            # increase() extrapolates to the window's edges: a count, rounded (at least 1).
            detail = f"GPU {gpu}: {what} ({max(1, round(s.value))})"
            add(
                _node(s),
                Evidence("memory", detail, policy.actions.memory, series, s.value, at, gpu),
            )

    limit = policy.pcie_replays_per_hour
    for s in _by_gpu(prom.query(f"rate({PCIE_REPLAY}{sel}[{w}]) * 3600 > {limit}", at)):
        gpu = s.labels.get(L.GPU, "")
        detail = f"GPU {gpu}: {s.value:.0f} PCIe replays an hour (above {limit})"
        add(
            _node(s),
            Evidence("pcie", detail, policy.actions.pcie, PCIE_REPLAY, round(s.value), at, gpu),
        )

    reasons = " or ".join(f"last_over_time({m}{sel}[{STALE_S}s])" for m in THROTTLE)
    for s in _by_gpu(prom.query(reasons, at)):
        bits = [name for bit, name in THROTTLE_BITS.items() if int(s.value) & bit]
        if bits:
            gpu = s.labels.get(L.GPU, "")
            add(_node(s), Evidence(
                "throttling", f"GPU {gpu}: clocks held down ({', '.join(bits)})",
                policy.actions.throttling, s.labels.get("__name__", THROTTLE[0]),
                hex(int(s.value)), at, gpu,
            ))  # fmt: skip

    _storage(prom, sel, policy, at, checkpoint_mount, add)
    _fabric(prom, sel, w, policy, at, add)
    _heartbeat(prom, sel, w, policy, at, add)
    _checks(prom, sel, policy, at, add)
    return list(nodes.values())


def _by_gpu(samples: Iterable[Sample]) -> list[Sample]:
    """One sample per (node, GPU): the largest, where relabelled series gave several."""
    best: dict[tuple[str, str], Sample] = {}
    for s in samples:
        k = (_node(s), s.labels.get(L.GPU, ""))
        if k not in best or s.value > best[k].value:
            best[k] = s
    return [best[k] for k in sorted(best)]


def _storage(prom, sel, policy, at, mount, add) -> None:
    # md arrays short of their members: required minus active (node_exporter's mdadm collector).
    inner = sel[1:-1]
    active = MD_DISKS + "{" + inner + ',state="active"}'
    short = (
        f"max by ({L.NODE}, device) ({_current(MD_REQUIRED + sel)})"
        f" - max by ({L.NODE}, device) ({_current(active)}) > 0"
    )
    for s in prom.query(short, at):
        dev = s.labels.get("device", "?")
        detail = f"md array {dev} is {s.value:g} member(s) short of its required drives"
        add(_node(s), Evidence("storage", detail, policy.actions.storage, MD_DISKS, s.value, at))
    if mount:
        at_mount = f"{{{inner},mountpoint={L.quote(mount)}}}"
        ro = f"max by ({L.NODE}) ({_current(FS_READONLY + at_mount)}) == 1"
        for s in prom.query(ro, at):
            detail = f"the checkpoint filesystem {mount} is read-only"
            add(_node(s), Evidence("storage", detail, policy.actions.storage, FS_READONLY, 1, at))
        bad = f"max by ({L.NODE}) ({_current(FS_DEVICE_ERROR + at_mount)}) == 1"
        for s in prom.query(bad, at):
            detail = (
                f"the checkpoint filesystem {mount} cannot be read (node_exporter's statfs fails)"
            )
            add(
                _node(s),
                Evidence("storage", detail, policy.actions.storage, FS_DEVICE_ERROR, 1, at),
            )


def _fabric(prom, sel, w, policy, at, add) -> None:
    state = f"max by ({L.NODE}, device, port) ({_current(IB_STATE + sel)}) != {IB_ACTIVE}"
    for s in prom.query(state, at):
        port = f"{s.labels.get('device', '?')} port {s.labels.get('port', '?')}"
        detail = f"InfiniBand {port} is not ACTIVE (state {s.value:g})"
        add(_node(s), Evidence("fabric", detail, policy.actions.fabric, IB_STATE, s.value, at))
    downed = f"sum by ({L.NODE}, device, port) (increase({IB_LINK_DOWNED}{sel}[{w}])) > 0"
    for s in prom.query(downed, at):
        port = f"{s.labels.get('device', '?')} port {s.labels.get('port', '?')}"
        detail = f"InfiniBand {port} went down {s.value:.0f} time(s) in the window"
        add(
            _node(s), Evidence("fabric", detail, policy.actions.fabric, IB_LINK_DOWNED, s.value, at)
        )


def _checks(prom, sel, policy, at, add) -> None:
    """Each check Slurm's health check fails on the node now (as of its last scrape: a check
    that passes again drops out of the file, and its series goes stale)."""
    for s in prom.query(f"max by ({L.NODE}, check) ({_current(CHECK_FAILED + sel)}) == 1", at):
        check = s.labels.get("check", "?")
        fault = "storage" if check in STORAGE_CHECKS else "validation"
        action = getattr(policy.actions, fault)
        detail = f"Slurm's health check fails {check} on the node"
        add(_node(s), Evidence(fault, detail, action, CHECK_FAILED, check, at))


def _heartbeat(prom, sel, w, policy, at, add) -> None:
    """A node whose last heartbeat in the window is more than STALE_S older than the job's
    freshest, while that freshest one is recent: the job goes on elsewhere, not here."""
    last = {
        _node(s): s.value
        for s in prom.query(f"max by ({L.NODE}) (max_over_time({L.HEARTBEAT}{sel}[{w}]))", at)
    }
    if len(last) < 2:
        return
    freshest = max(last.values())
    if at - freshest > STALE_S:
        return  # the whole job stopped (or ended): not one node's fault
    for node, t in sorted(last.items()):
        if freshest - t > STALE_S:
            detail = (
                f"the job's heartbeat stopped {at - t:.0f} s ago here, while its other nodes"
                f" beat {at - freshest:.0f} s ago"
            )
            add(node, Evidence("heartbeat", detail, policy.actions.heartbeat, L.HEARTBEAT, t, at))
