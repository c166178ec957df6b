"""The scheduler as the plan carries it (`Plan.scheduler`): frozen values, compiled by
`rackform.plan.scheduler`. Apart from the compiler so that the plan's model can name them without
importing what compiles them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlurmNode:
    name: str  # the host's name in the blueprint (and the inventory); Slurm's NodeName
    group: str
    gpus: int  # GPUs the node group declares (0 on a CPU-only host)
    gpu_type: str | None  # the GRES type, from the catalog's GPU model (e.g. h100_sxm)


@dataclass(frozen=True)
class PartitionPlan:
    name: str
    nodes: tuple[str, ...]
    default: bool
    priority_tier: int
    preemptible: bool
    max_time_min: int | None


@dataclass(frozen=True)
class Switch:
    """A topology.conf switch: a leaf with nodes, or the root above the leaves."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmTopology:
    plugin: str  # slurm.conf's TopologyPlugin: topology/block, topology/tree or topology/none
    text: str  # topology.conf below the role's `ansible_managed` line


# The tag on a controller instance a stack creates (the cluster's tags say whose it is): people,
# and `rackform diff` when a change would replace it, tell it from the nodes by it.
CONTROLLER_TAG = ("rackform:slurm", "controller")


@dataclass(frozen=True)
class ControllerInstance:
    """The Slurm controller a stack creates for the cluster (AWS): an instance of its own that
    runs slurmctld and is no node (no slurmd, in no partition)."""

    name: str  # its inventory name, the stack's instance name (`names.controller_name`)
    instance_type: str


@dataclass(frozen=True)
class QosPlan:
    name: str
    priority: int
    max_gpus: int | None  # GrpTRES=gres/gpu: every job of the QOS together
    max_gpus_per_user: int | None  # MaxTRESPerUser=gres/gpu
    max_gpus_per_account: int | None  # MaxTRESPerAccount=gres/gpu


@dataclass(frozen=True)
class AccountPlan:
    name: str
    share: int  # Slurm Fairshare
    users: tuple[str, ...]
    qos: tuple[str, ...]  # the QOS its jobs may use ('normal' included where allowed)
    default_qos: str
    max_gpus: int | None  # GrpTRES=gres/gpu on the account's association


@dataclass(frozen=True)
class FairnessPlan:
    """Slurm's accounting (slurmdbd) with fairshare between accounts and QOS."""

    accounts: tuple[AccountPlan, ...]
    qos: tuple[QosPlan, ...]
    half_life_days: int
    fairshare_weight: int
    qos_weight: int


@dataclass(frozen=True)
class SchedulerPlan:
    type: str
    controller: str
    nodes: tuple[SlurmNode, ...]
    partitions: tuple[PartitionPlan, ...]
    switches: tuple[Switch, ...]
    preempt_mode: str  # what a preempted job's fate is: requeue
    grace_s: int  # seconds between SIGTERM and SIGKILL for a preempted job
    checkpoint_dir: str  # the jobs' checkpoint path: the nodes' checkpoint mount
    # Where slurmctld runs: one of the nodes (bare metal, colocation: `controller` is a host of
    # the blueprint, and it runs slurmd too), or an instance the stack creates (AWS: no node).
    instance: ControllerInstance | None = None
    fairness: FairnessPlan | None = None  # None: no accounting (no slurmdbd)
    # topology.conf as `rackform.plan.slurm_topology` writes it, and the TopologyPlugin, where
    # the blueprint declares a topology (None: one leaf per rack, written as it always was).
    topology: SlurmTopology | None = None
    # topology.yaml (Slurm 25.05+) where an NVLink domain spans nodes and the fabric has switches
    # (`slurm_topology.topology_yaml`): the blocks and the tree at once; "" otherwise.
    topology_yaml: str = ""
    # sbatch's options that keep the smoke job (every node) in one NVLink domain or leaf.
    placement: tuple[str, ...] = ()

    @property
    def controller_is_node(self) -> bool:
        return self.instance is None
