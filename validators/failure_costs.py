"""What each lost node cost an elastic training job, from the job's own records. Standard
library only.

When a node is lost under torchrun's elastic agent, the ranks left see their next collective
fail; each node's first rank notes, in `interrupted.json` beside the node's checkpoints, the last
step it finished and when, then exits, and the agent restarts the workers with the nodes left.
The resumed run reads the notes of every node and records one failure:

- work redone: the steps finished since the checkpoint it resumes from (`redone_steps`), and the
  seconds they took (`redone_s`);
- time to continue (`continue_s`): from the last step finished before the loss to the resumed
  run being ready to train (detection, the agents' new rendezvous, the workers' start, the
  restore), with the detection alone as `detect_s`;
- time at reduced size (`reduced_s`, counted at report time from the runs): from the failure
  until a run at the job's full size starts again, or the job ends.

A node taken back at a checkpoint boundary (the agent stops the workers with SIGTERM when a node
waits to join; the job checkpoints and stops) is a `rejoin`: nothing redone, its `continue_s`
from the stop to the resumed run.

Where the job runs short, each checkpoint decides whether taking the lost nodes back pays
(validators/takeback.py): the decisions, with their numbers, are `take_backs`, one each time the
answer changes."""

from __future__ import annotations

import json
import os

from validators import nofollow, report

INTERRUPTED = "interrupted.json"


def note(root: str, step: int, step_time: float, mark: tuple[int, float], world: int,
         seen: float, error: str) -> None:  # fmt: skip
    """Record, in `root`, that this run lost a peer after finishing `step` steps (at
    `step_time`); `mark` is (step, time) of its last checkpoint or, before one, of its start."""
    doc = {"step": step, "step_time": step_time, "mark_step": mark[0], "mark_time": mark[1],
           "world": world, "seen": seen, "error": error[:300]}  # fmt: skip
    nofollow.write_whole(os.path.join(root, INTERRUPTED), json.dumps(doc))


def read(root: str) -> dict | None:
    try:
        with open(os.path.join(root, INTERRUPTED)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def failure(notes: list[dict | None], known: list[dict], resumed_step: int, world: int,
            resumed_at: float) -> dict | None:  # fmt: skip
    """The failure the nodes' notes describe (the newest, by the step it reached), as the run
    resumed at `resumed_step` with `world` ranks at `resumed_at` records it; None when there is
    no note or it is already recorded (`known`: the failures so far)."""
    seen = {f["seen"] for f in known}
    fresh = [n for n in notes if n and n["seen"] not in seen and n["step"] >= resumed_step]
    if not fresh:
        return None
    n = max(fresh, key=lambda n: (n["step"], n["seen"]))
    redone_s = n["step_time"] - n["mark_time"] if n["mark_step"] == resumed_step else None
    return {
        "seen": n["seen"],
        "lost_at_step": n["step"],
        "resumed_from_step": resumed_step,
        "world_before": n["world"],
        "world_after": world,
        "redone_steps": n["step"] - resumed_step,
        "redone_s": None if redone_s is None else round(max(0.0, redone_s), 3),
        "detect_s": round(max(0.0, n["seen"] - n["step_time"]), 3),
        "continue_s": round(resumed_at - n["step_time"], 3),
        "error": n["error"],
    }


def rejoin(previous: dict, world: int, resumed_at: float) -> dict | None:
    """A run that stopped on SIGTERM at a checkpoint and came back with more ranks: the node
    taken back. None otherwise."""
    if previous.get("ended") != "SIGTERM" or previous.get("world", world) >= world:
        return None
    stopped = previous.get("stopped", resumed_at)
    return {
        "at_step": previous["to_step"],
        "world_before": previous["world"],
        "world_after": world,
        "continue_s": round(resumed_at - stopped, 3),
    }


def restart_cost(progress: dict, default_s: float, requeue_delay_s: float) -> tuple[float, float]:
    """What a take-back would cost this job, from its own records: (restart, requeue delay).
    The newest node taken back measured the whole of it (`continue_s` from the stop to the
    requeued run, Slurm's delay included); else the newest failure's time to continue (the
    agents' restart in place: the requeue delay comes on top); else `default_s` and the delay."""
    for f in reversed(progress.get("rejoins", [])):
        if isinstance(f.get("continue_s"), (int, float)) and f["continue_s"] >= 0:
            return float(f["continue_s"]), 0.0
    for f in reversed(progress.get("failures", [])):
        if isinstance(f.get("continue_s"), (int, float)) and f["continue_s"] >= 0:
            return float(f["continue_s"]), requeue_delay_s
    return default_s, requeue_delay_s


def take_back_record(progress: dict, decision: dict | None, step: int, now: float) -> bool:
    """Record a take-back decision (validators/takeback.py's, as a dict) in the job's failure
    costs, `take_backs`, with its numbers; only where it differs from the last one recorded
    (its kind, the nodes running) or took back, so that a job short for many checkpoints
    records each change once. Whether it was recorded (and is worth printing)."""
    if not decision:
        return False
    done = progress.setdefault("take_backs", [])
    key = (decision.get("kind"), decision.get("running"), decision.get("nodes"))
    last = done[-1] if done else {}
    if not decision.get("take") and key == (
        last.get("kind"),
        last.get("running"),
        last.get("nodes"),
    ):
        return False
    done.append({"step": step, "time": round(now, 3), **decision})
    return True


def _end(runs: list[dict], i: int, now: float) -> float:
    """When run `i` ended: its stop, else (killed) the next run's start, else now."""
    r = runs[i]
    if r.get("stopped"):
        return r["stopped"]
    return runs[i + 1]["started"] if i + 1 < len(runs) else now


def reduced_s(runs: list[dict], since: float, now: float) -> float:
    """Seconds of runs with fewer ranks than the most any run had, from `since` until a run at
    that full size starts again (or `now`)."""
    full = max((r.get("world", 0) for r in runs), default=0)
    total = 0.0
    for i, r in enumerate(runs):
        if r["started"] < since:
            continue
        if r.get("world", full) >= full:
            break
        total += max(0.0, _end(runs, i, now) - r["started"])
    return round(total, 3)


def checks(progress: dict, every: int, min_nodes: int | None, now: float) -> list[report.Check]:
    """One check per failure (the work redone is at most one checkpoint interval: more would
    mean the job resumed from an older checkpoint than it wrote), with what it cost in the
    detail; and, given a minimum, that no run had fewer nodes."""
    out = []
    runs = progress.get("runs", [])
    for i, f in enumerate(progress.get("failures", []), 1):
        f["reduced_s"] = reduced_s(runs, f["seen"], now)
        secs = "?" if f["redone_s"] is None else f"{f['redone_s']:g}"
        out.append(
            report.compare(
                "lost_node",
                f["redone_steps"],
                every,
                "steps",
                "<=",
                detail=(
                    f"failure {i}: lost at step {f['lost_at_step']} (ranks {f['world_before']} ->"
                    f" {f['world_after']}): {f['redone_steps']} steps ({secs} s) redone from"
                    f" step {f['resumed_from_step']}; continued {f['continue_s']:g} s after the"
                    f" last step (detected after {f['detect_s']:g} s); {f['reduced_s']:g} s at"
                    " reduced size"
                ),
            )
        )
    if min_nodes is not None and runs:
        fewest = min(r.get("nodes", 0) for r in runs)
        out.append(
            report.compare(
                "elastic_min_nodes",
                fewest,
                min_nodes,
                "nodes",
                ">=",
                detail=f"the fewest nodes any of the {len(runs)} runs had",
            )
        )
    return out
