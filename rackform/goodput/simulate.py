"""A seeded discrete-event simulation (SimPy) of one training job on a cluster over a run:
node failures drawn per node, heal's own decisions in the loop, and the job requeued at full
size or going on elastic; what share of the GPU-hours paid for became training.

The world, each a SimPy process:
- Each node fails after an exponential time in service at the scenario's rate; the class
  (hardware, software, network) is drawn by the catalog source's shares. A software fault
  crashes the job and leaves the node well; a hardware or network fault leaves the node broken
  (the job crashes too, where the node was in it).
- Heal runs every `heal_period_s`: the broken nodes become `NodeHealth` with the evidence of
  their fault (hardware: a GPU fallen off the bus, `gpu_missing`; network: a fabric port
  down, `fabric`) and the policy's action for it, the nodes out of service marked so, and
  heal's own functions decide: `health.verdict.judge_cluster` (the breaker, the out-of-service
  budget, the order) and `triage` (a person's ticket, a replacement, a remediation, with the
  failures counted in the policy's window). A remediation takes its time and re-validation;
  it fixes a share of hardware faults, the rest fail re-validation and go to a person.
- The job: a restart (relaunch + the checkpoint read back), then segments of `interval_s` of
  training each closed by a checkpoint that blocks `checkpoint_s`. A failure of one of its
  nodes loses the segment's training (redone) and restarts it. Requeue-only: it waits for a
  whole allocation. Elastic: heal's own rule decides, as heal and the rollouts' drain do
  (`lifecycle.elastic.decide`, the job as Slurm shows it: its nodes in allocation order, the
  first its batch host, the launcher's mark with `min_nodes`): shrunk off a node taken out of
  service, it goes on with its other nodes from its last checkpoint; requeued where it cannot
  (the node taken is its first, or too few would be left), it waits for a whole allocation as
  a requeue-only job does. A software fault leaves its nodes well: torchrun's agents restart
  the workers where they are. A job running short takes nodes back at a checkpoint boundary
  by the job's own rule (`validators/takeback.py`, which `requeue_when_back` asks): where as
  many nodes as it lost are in service and idle (its own back, or spares) and the run's time
  left times the share lost exceeds a restart (`restart_s`); a requeue at full size, one
  restart, no work redone. Progress scales with the nodes (data
  parallel).

Every node-second is one of: training kept, training redone, restarting, checkpointing,
waiting (in service, not in a running job), out of service; they sum to the nodes x the run."""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field

import simpy

from rackform.goodput.scenario import ELASTIC, REQUEUE, Scenario
from rackform.health.verdict import Evidence, NodeHealth, judge_cluster, triage
from rackform.lifecycle.elastic import MARK, SHRINK, Held, decide
from rackform.paths import validators_importable
from rackform.plan.interval import HOUR, exponential_goodput, first_order_goodput

TRAIN, REDONE, RESTART, CKPT, WAIT, OUT = (
    "training",
    "redone",
    "restarts",
    "checkpoints",
    "waiting",
    "out_of_service",
)
CAUSES = (REDONE, RESTART, WAIT, CKPT, OUT)
UP, BROKEN, REPAIR = "up", "broken", "repair"
REDUCED = "went on at reduced size"
TOOK_BACK = "took its nodes back (requeued at full size)"
HELD_BACK = "went on short: the nodes were there, a take-back would not pay"
CLASSES = ("hardware", "software", "network")


@dataclass
class Result:
    scenario: str
    mode: str
    seed: int
    hours: float
    nodes: int
    gpus_per_node: int
    node_seconds: dict[str, float]
    failures: Counter = field(default_factory=Counter)
    repairs: list[tuple[str, float, str]] = field(default_factory=list)  # node, seconds, how
    waits: Counter = field(default_factory=Counter)  # heal's reasons a broken node waited
    restarts: int = 0
    # Elastic: heal's decision for each failure that took a node of the running job out of
    # service (REDUCED, or "requeued: " and its reason), and the job's take-backs (TOOK_BACK).
    decisions: Counter = field(default_factory=Counter)
    min_size: int = 0
    up_at_end: int = 0  # nodes in service when the run ends

    @property
    def paid_gpu_hours(self) -> float:
        return self.nodes * self.gpus_per_node * self.hours

    @property
    def goodput(self) -> float:
        total = sum(self.node_seconds.values())
        return self.node_seconds[TRAIN] / total if total else 0.0

    def gpu_hours(self, bucket: str) -> float:
        return self.node_seconds[bucket] * self.gpus_per_node / HOUR


def lost_by_cause(result: Result) -> dict[str, float]:
    """GPU-hours lost by cause (redone work, restarts, waiting for capacity, checkpoints, nodes
    out of service): what `rackform goodput` prints and a report plots."""
    return {cause: round(result.gpu_hours(cause), 3) for cause in CAUSES}


class _World:
    def __init__(self, sc: Scenario, mode: str, seed: int, until: float):
        self.sc, self.mode, self.until = sc, mode, until
        self.env = simpy.Environment()
        self.rng = random.Random(seed)
        self.state = {self.name(i): UP for i in range(sc.nodes)}
        self.fault: dict[str, str] = {}
        self.broke_at: dict[str, float] = {}
        self.remedy_failed: dict[str, list[float]] = {}
        self.job: set[str] = set()
        self.lost: set[str] = set()  # nodes the elastic job was shrunk off, not yet taken back
        self.held_back = False  # the take-back rule said "does not pay" since the job shrank
        self.phase = WAIT
        self.acc = dict.fromkeys((TRAIN, REDONE, RESTART, CKPT, WAIT, OUT), 0.0)
        self.last = 0.0
        self.capacity = self.env.event()
        self.res = Result(sc.name, mode, seed, until / HOUR, sc.nodes, sc.gpus_per_node, self.acc)
        self.res.min_size = sc.job_nodes
        self.shares = [sc.rate.hardware, sc.rate.software, sc.rate.network]
        self.job_proc = self.env.process(self.run_job())
        for n in self.state:
            self.env.process(self.node(n))
        self.env.process(self.heal())

    @staticmethod
    def name(i: int) -> str:
        return f"gpu-{i:04d}"

    # -- accounting: every node-second in one bucket ------------------------------------------
    def flush(self) -> None:
        now = self.env.now
        dt = now - self.last
        if dt <= 0:
            return
        self.last = now
        in_job = sum(self.state[n] == UP for n in self.job)
        up = sum(s == UP for s in self.state.values())
        self.acc[self.phase] += in_job * dt
        self.acc[WAIT] += (up - in_job) * dt
        self.acc[OUT] += (self.sc.nodes - up) * dt

    def up(self) -> list[str]:
        return [n for n, s in self.state.items() if s == UP]

    def returned(self, node: str, how: str) -> None:
        self.flush()
        self.state[node] = UP
        self.res.repairs.append((node, self.env.now - self.broke_at.pop(node), how))
        self.fault.pop(node, None)
        if not self.capacity.triggered:
            self.capacity.succeed()

    # -- the nodes ----------------------------------------------------------------------------
    def node(self, name: str):
        rate_s = self.sc.rate.per_node_hour / HOUR
        if rate_s <= 0:
            return
        while True:
            yield self.env.timeout(self.rng.expovariate(rate_s))
            if self.state[name] != UP:
                continue  # memoryless: a node out of service draws again once back
            cls = self.rng.choices(CLASSES, self.shares)[0]
            self.flush()
            self.res.failures[cls] += 1
            if cls != "software":
                self.state[name], self.fault[name] = BROKEN, cls
                self.broke_at[name] = self.env.now
            if name in self.job and self.job_proc.is_alive:
                self.job_proc.interrupt((cls, name))

    # -- heal, with its own decisions ---------------------------------------------------------
    def evidence(self, node: str) -> list[Evidence]:
        actions = self.sc.policy.actions
        if self.fault[node] == "network":
            return [Evidence("fabric", "fabric port down", actions.fabric)]
        return [Evidence("gpu_missing", "a GPU fell off the bus", actions.gpu_missing)]

    def heal(self):
        a, policy = self.sc.assumptions, self.sc.policy
        while True:
            yield self.env.timeout(a.heal_period_s)
            broken = [n for n, s in self.state.items() if s == BROKEN]
            if not broken:
                continue
            nodes = [
                NodeHealth(
                    n,
                    "gpu",
                    True,
                    self.evidence(n) if s == BROKEN else [],
                    out_of_service=s == REPAIR,
                )
                for n, s in self.state.items()
            ]
            judge_cluster(nodes, policy, budget=self.sc.budget)
            for n in nodes:
                if n.waits:
                    self.res.waits[re.sub(r" \(\d+ out\)$", "", n.waits)] += 1
            since = self.env.now - policy.retry_window_hours * HOUR
            failed = Counter(
                {n: c for n, ts in self.remedy_failed.items() if (c := sum(t >= since for t in ts))}
            )
            t = triage([n for n in nodes if n.acts], failed)
            self.flush()
            for n in t.ticket:
                self.state[n.node] = REPAIR
                self.env.process(self.repair(n.node, a.ticket_s, "a person's repair"))
            for n in t.swap:
                self.state[n.node] = REPAIR
                self.env.process(self.repair(n.node, a.remedy_s["replace"], "replaced"))
            for n in t.remediate:
                self.state[n.node] = REPAIR
                self.env.process(self.remediate(n.node, n.action))

    def repair(self, node: str, seconds: float, how: str):
        yield self.env.timeout(seconds + self.sc.policy.validate_minutes * 60)
        self.returned(node, how)

    def remediate(self, node: str, action: str):
        a = self.sc.assumptions
        yield self.env.timeout(a.remedy_s.get(action, 0.0) + self.sc.policy.validate_minutes * 60)
        if self.fault.get(node) == "hardware" and self.rng.random() < a.fixed_share:
            self.returned(node, action)
            return
        # Failed re-validation: drained with the reason; the next heal run sees it broken
        # again and, after GIVE_UP_AFTER failures in the window, leaves it to a person.
        self.flush()
        self.remedy_failed.setdefault(node, []).append(self.env.now)
        self.state[node] = BROKEN

    # -- the job ------------------------------------------------------------------------------
    def set_phase(self, phase: str, nodes: set[str] | None = None) -> None:
        self.flush()
        self.phase = phase
        if nodes is not None:
            self.job = nodes

    def run_job(self):
        sc, first = self.sc, True
        kept: tuple[str, ...] = ()  # shrunk: the nodes it goes on with, no queue
        while True:
            if kept:
                order, kept = kept, ()
            else:  # submitted or requeued: Slurm starts it on a whole allocation
                up = self.up()
                if len(up) < sc.job_nodes:
                    self.set_phase(WAIT, set())
                    if self.capacity.triggered:
                        self.capacity = self.env.event()
                    yield self.capacity  # no node of its own: nothing interrupts the wait
                    continue
                order, self.lost = tuple(up[: sc.job_nodes]), set()
            nodes = set(order)
            self.held_back = self.held_back and len(nodes) < sc.job_nodes
            self.res.min_size = min(self.res.min_size, len(nodes))
            try:
                if not first:
                    self.res.restarts += 1
                    self.set_phase(RESTART, nodes)
                    yield self.env.timeout(sc.restart_s)
                first = False
                while True:
                    self.set_phase(TRAIN, nodes)
                    start = self.env.now
                    try:
                        yield self.env.timeout(sc.interval_s)
                        self.set_phase(CKPT)
                        yield self.env.timeout(sc.checkpoint_s)
                    except simpy.Interrupt:
                        self.flush()
                        lost = min(self.env.now - start, sc.interval_s) * len(nodes)
                        self.acc[TRAIN] -= lost
                        self.acc[REDONE] += lost
                        raise
                    # A checkpoint boundary: a job running short takes nodes back (a requeue
                    # at full size) where the job's own rule says it pays.
                    if len(nodes) < sc.job_nodes and self._takes_back(nodes):
                        break
            except simpy.Interrupt as stop:
                first = False
                kept = self._goes_on(order, *stop.cause)

    def _takes_back(self, nodes: set[str]) -> bool:
        """The job's own rule (validators/takeback.py, as requeue_when_back asks it): the nodes
        to run at full size in service and idle (its lost ones back, or spares), and the run's
        time left times the share lost worth a restart (`restart_s`: the simulation's restart
        is the whole of it, no requeue delay besides)."""
        idle = sum(1 for n in self.up() if n not in nodes)
        rule = _rule()
        d = rule.decide(
            self.sc.job_nodes, len(nodes), idle, self.until - self.env.now, self.sc.restart_s
        )
        if d.take:
            self.res.decisions[TOOK_BACK] += 1
        elif d.kind == rule.SHORT and not self.held_back:
            self.held_back = True  # once for each time the job runs short
            self.res.decisions[HELD_BACK] += 1
        return d.take

    def _goes_on(self, order: tuple[str, ...], cls: str, node: str) -> tuple[str, ...]:
        """The nodes the job goes on with after `node`'s fault, without the queue; () where
        it is requeued (requeue-only, or heal's rule says so)."""
        if self.mode != ELASTIC:
            return ()
        if cls == "software":  # the node is well: the agents restart the workers in place
            return order
        held = Held("job", "RUNNING", order, order[0], f"{MARK}{self.sc.min_nodes}")
        d = decide(held, {node})
        if d.action == SHRINK:
            self.res.decisions[REDUCED] += 1
            self.lost.add(node)
            return d.keep
        # decide's reason, without the node's name and counts that differ from one to the next
        self.res.decisions["requeued: " + re.sub(r"\d+", "N", d.why.replace(node, "NODE"))] += 1
        return ()


def _rule():
    """The take-back rule the job runs (validators/takeback.py), as the collection ships it:
    validators/ imports no rackform, and rackform reads it where it ships (rackform/paths.py)."""
    validators_importable()
    from validators import takeback

    return takeback


def simulate(sc: Scenario, mode: str, seed: int, days: float) -> Result:
    """One seeded run of `days`; the same seed gives the same result."""
    if mode not in (REQUEUE, ELASTIC):
        raise ValueError(f"mode {mode!r}: requeue or elastic")
    until = days * 24 * HOUR
    w = _World(sc, mode, seed, until)
    w.env.run(until=until)
    w.flush()
    w.res.up_at_end = len(w.up())
    return w.res


@dataclass(frozen=True)
class Theory:
    """First-order and Daly's expected goodput for the job with a restart of R plus, for a
    requeue-only job, the mean wait for a failed node to come back."""

    job_mtbf_h: float
    first_order: float
    exponential: float
    holds: bool  # failures rare within a segment


def theory(sc: Scenario, extra_restart_s: float = 0.0) -> Theory:
    m = sc.rate.job_mtbf_s(sc.job_nodes)
    r = sc.restart_s + extra_restart_s
    fo = first_order_goodput(sc.interval_s, sc.checkpoint_s, r, m)
    ex = exponential_goodput(sc.interval_s, sc.checkpoint_s, r, m)
    seg = sc.interval_s + sc.checkpoint_s + r
    return Theory(m / HOUR if not math.isinf(m) else math.inf, fo, ex, m >= 10 * seg)
