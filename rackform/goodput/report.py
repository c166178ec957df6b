"""One blueprint's goodput, requeue-only and elastic side by side, with first-order theory,
what others published and the assumptions: `rackform goodput`'s document and text."""

from __future__ import annotations

import math
import statistics

from rackform.catalog.preflight import PreflightFigures
from rackform.goodput.scenario import ELASTIC, MODES, REQUEUE, Scenario
from rackform.goodput.simulate import CAUSES, OUT, WAIT, Result, lost_by_cause, simulate, theory
from rackform.plan.interval import HOUR

LABELS = {
    "redone": "redone work",
    "restarts": "restarts",
    "waiting": "waiting for capacity",
    "checkpoints": "checkpoints",
    "out_of_service": "nodes out of service",
}


def _repairs(r: Result) -> dict:
    hours = [s / HOUR for _, s, _ in r.repairs]
    per_node: dict[str, list[float]] = {}
    for node, s, _ in r.repairs:
        per_node.setdefault(node, []).append(round(s / HOUR, 3))
    return {
        "count": len(hours),
        "mean_h": round(statistics.fmean(hours), 3) if hours else None,
        "max_h": round(max(hours), 3) if hours else None,
        "per_node_h": dict(sorted(per_node.items())),
        "still_out": r.nodes - r.up_at_end,
    }


def why(sc: Scenario, r: Result) -> list[str]:
    """Where first-order theory does not describe the run, what does."""
    out: list[str] = []
    th = theory(sc)
    if not th.holds:
        seg = (sc.interval_s + sc.checkpoint_s + sc.restart_s) / 60
        out.append(
            f"the job's {sc.job_nodes} nodes fail every {th.job_mtbf_h:.1f} h, under 10 segments "
            f"of {seg:.0f} min: failures come within a few intervals, so first-order theory "
            "does not hold (Daly's exponential figure is the nearer)"
        )
    for reason, runs in sorted(r.waits.items()):
        out.append(f"heal left a broken node waiting {runs} time(s): {reason}")
    waited = r.gpu_hours(WAIT)
    if r.mode == REQUEUE and waited > 0.01 * r.paid_gpu_hours:
        out.append(
            f"the requeue-only job waited for a full allocation: {waited:,.0f} GPU-hours of "
            "nodes in service stood idle while a failed node was repaired"
        )
    if r.mode == ELASTIC and r.min_size < sc.job_nodes:
        out.append(f"the elastic job ran on as few as {r.min_size} of {sc.job_nodes} nodes")
    if r.mode == ELASTIC and r.decisions:
        said = "; ".join(f"{k} x {n}" for k, n in sorted(r.decisions.items()))
        out.append(
            "heal's rule for the elastic job (lifecycle.elastic.decide) and its take-back"
            f" (validators/takeback.py): {said}"
        )
    out_h = r.gpu_hours(OUT)
    if out_h > 0.01 * r.paid_gpu_hours:
        out.append(
            f"nodes out of service cost {out_h:,.0f} GPU-hours: remediation, re-validation "
            "and a person's repairs"
        )
    return out


def document(sc: Scenario, figures: PreflightFigures, seed: int, days: float) -> dict:
    """Both modes' runs of one scenario, with theory, published figures and assumptions."""
    th = theory(sc)
    runs = {mode: simulate(sc, mode, seed, days) for mode in MODES}
    pub = figures.published
    return {
        "scenario": sc.name,
        "seed": seed,
        "days": days,
        "nodes": sc.nodes,
        "spares": sc.spares,
        "gpus_per_node": sc.gpus_per_node,
        "paid_gpu_hours": round(runs[REQUEUE].paid_gpu_hours, 1),
        "checkpoint": {
            "interval_min": round(sc.interval_s / 60, 3),
            "blocking_s": round(sc.checkpoint_s, 3),
            "restart_s": round(sc.restart_s, 3),
        },
        "failures": {
            "per_node_hour": sc.rate.per_node_hour,
            "source": sc.rate.source,
            "shares": {
                "hardware": sc.rate.hardware,
                "software": sc.rate.software,
                "network": sc.rate.network,
            },
            "job_mtbf_h": None if math.isinf(th.job_mtbf_h) else round(th.job_mtbf_h, 3),
        },
        "heal": {
            "budget": sc.budget,
            "breaker_fraction": sc.policy.breaker_fraction,
            "validate_minutes": sc.policy.validate_minutes,
            "min_nodes": sc.min_nodes,
        },
        "modes": {
            mode: {
                "goodput": round(r.goodput, 5),
                "lost_gpu_hours": lost_by_cause(r),
                "failures": dict(sorted(r.failures.items())),
                "restarts": r.restarts,
                "smallest_job_nodes": r.min_size,
                "elastic_decisions": dict(sorted(r.decisions.items())),
                "time_to_repair": _repairs(r),
                "why": why(sc, r),
            }
            for mode, r in runs.items()
        },
        "theory": {
            "first_order": round(th.first_order, 5),
            "exponential": round(th.exponential, 5),
            "holds": th.holds,
            "note": "a restart of relaunch + read back, the failed node back at once "
            "(requeue-only waits longer: see why)",
        },
        "published": {
            "llama3_effective_training": {
                "value": pub.llama3_effective_training.value,
                "source": pub.llama3_effective_training.source.url,
            },
            "hyperpod_goodput_claim": {
                "value": pub.hyperpod_goodput_claim.value,
                "source": pub.hyperpod_goodput_claim.source.url,
            },
        },
        "assumptions": sc.assumptions.as_json(),
    }


def _pct(v: float) -> str:
    return f"{v * 100:.1f}%"


def text(doc: dict) -> list[str]:
    """The document as the command prints it."""
    c, f, h, m = doc["checkpoint"], doc["failures"], doc["heal"], doc["modes"]
    rq, el = m[REQUEUE], m[ELASTIC]
    mtbf = "never" if f["job_mtbf_h"] is None else f"every {f['job_mtbf_h']:g} h"
    sh = f["shares"]
    spares = f" ({doc['spares']} spare)" if doc["spares"] else ""
    lines = [
        f"{doc['scenario']}: {doc['nodes']} nodes{spares} x {doc['gpus_per_node']} GPUs, "
        f"{doc['days']:g} days, seed {doc['seed']}",
        f"  checkpoint every {c['interval_min']:g} min, blocking {c['blocking_s']:g} s; "
        f"a restart {c['restart_s']:g} s",
        f"  failures {f['per_node_hour']:.3g} per node-hour ({f['source']}): the job's "
        f"nodes fail {mtbf}; hardware {sh['hardware']:.0%}, software {sh['software']:.0%}, "
        f"network {sh['network']:.0%}",
        f"  heal: {h['budget']} node(s) out at once, breaker {h['breaker_fraction']:.0%}, "
        f"re-validation {h['validate_minutes']} min; elastic down to {h['min_nodes']} nodes",
        f"  {'':<26}{'requeue-only':>14}{'elastic':>14}",
        f"  {'goodput':<26}{_pct(rq['goodput']):>14}{_pct(el['goodput']):>14}",
        "  GPU-hours lost by cause:",
    ]
    for cause in CAUSES:
        a, b = rq["lost_gpu_hours"][cause], el["lost_gpu_hours"][cause]
        lines.append(f"    {LABELS[cause]:<24}{a:>14,.0f}{b:>14,.0f}")
    fails = [sum(x["failures"].values()) for x in (rq, el)]
    lines.append(f"  {'failures':<26}{fails[0]:>14}{fails[1]:>14}")
    lines.append(f"  {'restarts':<26}{rq['restarts']:>14}{el['restarts']:>14}")
    ttr = [x["time_to_repair"] for x in (rq, el)]
    cells = ["-" if t["mean_h"] is None else f"{t['mean_h']:.1f} h x {t['count']}" for t in ttr]
    lines.append(f"  {'time to repair (mean)':<26}{cells[0]:>14}{cells[1]:>14}")
    th, pub = doc["theory"], doc["published"]
    holds = "holds" if th["holds"] else "does not hold"
    lines.append(
        f"  first-order theory: {_pct(th['first_order'])} (Daly's exponential "
        f"{_pct(th['exponential'])}; {holds})"
    )
    lines.append(
        f"  beside: Llama 3 kept over {_pct(pub['llama3_effective_training']['value'])} "
        f"effective training time; SageMaker HyperPod claims up to "
        f"{_pct(pub['hyperpod_goodput_claim']['value'])} goodput"
    )
    for mode, x in ((REQUEUE, rq), (ELASTIC, el)):
        lines += [f"  why ({mode}): {w}" for w in x["why"]]
    a = doc["assumptions"]
    remedies = ", ".join(f"{k} {v / 60:g} min" for k, v in a["remedy_s"].items())
    lines.append(
        f"  assumptions: relaunch {a['relaunch_s'] / 60:g} min, heal every "
        f"{a['heal_period_s'] / 60:g} min, {remedies}, {a['fixed_share']:.0%} of hardware "
        f"faults fixed by remediation, a person's repair {a['ticket_s'] / HOUR:g} h"
    )
    return lines


def table(docs: list[dict]) -> list[str]:
    """One markdown row per blueprint: what the goodput guide shows."""
    lines = [
        "| blueprint | nodes x GPUs | interval | checkpoint blocks | job fails every "
        "| failures | requeue-only | elastic | first order |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in docs:
        c, m, f = d["checkpoint"], d["modes"], d["failures"]
        mtbf = "never" if f["job_mtbf_h"] is None else f"{f['job_mtbf_h']:,.1f} h"
        lines.append(
            f"| `{d['file']}` | {d['nodes']} x {d['gpus_per_node']}"
            + (f" ({d['spares']} spare)" if d["spares"] else "")
            + " "
            f"| {c['interval_min']:,.1f} min | {c['blocking_s']:g} s | {mtbf} "
            f"| {sum(m[REQUEUE]['failures'].values())} | {_pct(m[REQUEUE]['goodput'])} | {_pct(m[ELASTIC]['goodput'])} "
            f"| {_pct(d['theory']['first_order'])} |"
        )
    return lines
