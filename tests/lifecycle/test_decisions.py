"""What reap, heal and a rolling change decide is a function of the evidence and the clock they
are given: the same evidence at the same (fake) time gives the same answer, run after run, so a
simulation can run the decisions rackform runs. The deciding modules call no wall clock of
their own: read from their source, with a check that a clock call would be seen."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from slurm_local import GPUS_PER_NODE, NODES, blueprint

from rackform.blueprint.schema.health import HealthPolicy
from rackform.blueprint.schema.rollout import RolloutPolicy
from rackform.engine import prepare
from rackform.health.apply import failures
from rackform.health.verdict import Evidence, NodeHealth, judge_cluster, triage
from rackform.lifecycle.audit import AuditLog
from rackform.lifecycle.maintenance import Result
from rackform.lifecycle.outcome import Outcome
from rackform.lifecycle.record import Store, new_record
from rackform.reap.idleness import GpuStats
from rackform.reap.notify import Notifier
from rackform.reap.run import World, consider
from rackform.reap.snooze import iso
from rackform.reap.target import Live
from rackform.reap.verdict import decide, protected
from rackform.rollout.plan import basis, rollout
from rackform.rollout.roll import Roll

ROOT = Path(__file__).resolve().parents[2]
AT = 1_800_000_000.0
SAMPLES = 60

# The modules whose functions decide: what a trigger does to which node or cluster, and when.
DECIDING = (
    "rackform/lifecycle/breaker.py",
    "rackform/lifecycle/budget.py",
    "rackform/lifecycle/states.py",
    "rackform/lifecycle/status.py",
    "rackform/lifecycle/maintenance.py",
    "rackform/reap/idleness.py",
    "rackform/reap/verdict.py",
    "rackform/reap/run.py",
    "rackform/health/verdict.py",
    "rackform/health/apply.py",
    "rackform/rollout/changes.py",
    "rackform/rollout/plan.py",
    "rackform/rollout/roll.py",
)
CLOCKS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "now", "utcnow", "today"}


def wall_clock_calls(source: str) -> list[int]:
    """The lines that call a clock (time.time(), time.monotonic(), datetime.now(), ...); a clock
    named as a default (`clock=time.monotonic`) is an injection point, not a call."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in CLOCKS and isinstance(f.value, ast.Name):
            if f.value.id in ("time", "datetime", "date"):
                out.append(node.lineno)
        elif isinstance(f, ast.Name) and f.id in ("time", "monotonic", "perf_counter"):
            out.append(node.lineno)
    return out


def test_the_deciding_modules_call_no_clock_of_their_own():
    found = {m: wall_clock_calls((ROOT / m).read_text()) for m in DECIDING}
    assert {m: lines for m, lines in found.items() if lines} == {}


def test_the_clock_check_sees_a_clock_call():
    src = (
        "import time\nfrom datetime import datetime\nfrom time import monotonic\n"
        "def f(clock=time.time):\n    return clock()\n"
        "def g(at=None):\n    at = time.time() if at is None else at\n"
        "def h():\n    return datetime.now(), monotonic()\n"
    )
    assert wall_clock_calls(src) == [7, 9, 9]


def stats(peak: float) -> list[GpuStats]:
    return [
        GpuStats(n, str(g), peak=peak, sum=peak * SAMPLES, samples=SAMPLES, fb_min=0.0,
                 fb_max=0.0, expected=SAMPLES, short=0, before=SAMPLES)
        for n in NODES
        for g in range(GPUS_PER_NODE)
    ]  # fmt: skip


@dataclass
class Quiet:
    """A target's reaper whose cluster is up, untagged and old."""

    def live(self, plan, action=None) -> Live:
        return Live(started=AT - 86400)


def test_reap_decides_the_same_on_the_same_evidence_and_clock(tmp_path):
    f = tmp_path / "bp.yaml"
    f.write_text(blueprint(grace=30))
    p = prepare(f)
    state = tmp_path / "state"
    AuditLog(state / "audit.jsonl").append(
        {"ts": AT - 600, "event": "warn", "state": "sent", "stack": p.plan.stack, "action": "drain"}
    )
    clock = {"now": AT}
    world = World(state, Notifier(), None, lambda target: Quiet(), queue=lambda plan: [],
                  now=lambda: clock["now"])  # fmt: skip

    def once() -> dict:
        d = decide(p.plan, stats(2.0), None, str(f), clock["now"])
        protected(d, p.plan)
        consider(d, p, world)
        return d.as_dict()

    first = once()
    assert first == once()
    assert (first["verdict"], first["action"], first["step"]) == ("idle", "drain", None)
    assert first["grace"] == {"warned": iso(AT - 600), "acts_after": iso(AT + 1200)}
    clock["now"] = AT + 25 * 3600  # the warning is stale a day on: warned anew, each time
    later = once()
    assert later == once() and later["step"] == "warn"


def test_heal_decides_the_same_on_the_same_evidence_and_clock(tmp_path):
    policy = HealthPolicy(retry_window_hours=1)
    store = Store(tmp_path, "gpu-a-prod", kind="heal")
    store.log.append({"ts": AT - 1800, "event": "batch", "kind": "heal", "nodes": ["n1"],
                      "status": "failed"})  # fmt: skip
    store.log.append({"ts": AT - 600, "event": "batch", "kind": "heal", "nodes": ["n1"],
                      "status": "failed"})  # fmt: skip

    def once(now: float) -> tuple:
        nodes = [NodeHealth(f"n{i}", "gpu", True,
                            [Evidence("xid", "XID 79", "reset")] if i < 2 else [])
                 for i in range(10)]  # fmt: skip
        b = judge_cluster(nodes, policy, budget=2)
        t = triage([n for n in nodes if n.acts], failures(store, now - 3600))
        return (
            b,
            [n.as_json() for n in nodes],
            [[n.node for n in part] for part in vars(t).values()],
        )

    first = once(AT)
    assert first == once(AT)
    assert first[2] == [["n1"], [], ["n0"]]  # n1 failed twice in the hour: a person's
    assert once(AT + 2400)[2] == [[], [], ["n0", "n1"]]  # later, one failure left in the hour


@dataclass
class FakeSlurm:
    clock: dict

    def out(self):
        return set()

    def drain(self, batch, reason):
        self.clock["now"] += 30
        return [Outcome(n, True, "drained") for n in batch]

    def release(self, batch):
        return []

    def wait_idle(self, batch, timeout_s):
        return []

    def resume(self, batch):
        return [Outcome(n, True, "back") for n in batch]


@dataclass
class FakeNodes:
    clock: dict

    def apply(self, batch, variables, reboot):
        self.clock["now"] += 120
        return Result(True)

    def validate(self, batch, timeout_s):
        self.clock["now"] += 60
        return Result("slurm-a-1" not in batch, "smoke job failed")


def test_a_rolling_change_runs_the_same_on_a_simulated_cluster(tmp_path):
    f = tmp_path / "bp.yaml"
    f.write_text(blueprint())
    plan = prepare(f).plan
    old, new = basis(plan), basis(plan, {"nvidia_driver_branch": "999"})
    planned = rollout(old, new)
    assert planned.as_json() == rollout(old, new).as_json()

    def once(where: Path) -> dict:
        clock = {"now": AT}
        store = Store(where, plan.stack)
        rec = new_record(plan.stack, plan.digest, planned.cls, planned.batches, {}, {})
        Roll(store, rec, RolloutPolicy(pause_on_failure=False), planned.budget,
             FakeSlurm(clock), FakeNodes(clock), lambda _: None,
             clock=lambda: clock["now"]).run()  # fmt: skip
        doc = json.loads(store.path.read_text())
        doc.pop("started")
        return doc

    first = once(tmp_path / "a")
    assert first == once(tmp_path / "b")
    assert [(b["status"], b["seconds"]) for b in first["batches"]] == [
        ("done", {"drain": 30.0, "apply": 120.0, "validate": 60.0}),
        ("failed", {"drain": 30.0, "apply": 120.0}),
    ]
