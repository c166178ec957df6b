"""What a cluster costs, per hour and per month, and what a training run on it costs.

- Capacity: the target's compiler prices it: AWS instances at the catalog's price for the
  market, bare metal as amortized hardware plus electricity, colocation as committed kW plus
  amortized hardware.
- Checkpoint storage: size x checkpoints retained (what each job keeps on the object tier,
  `storage.object`: the Slurm prolog gives jobs that figure) x $/GB-month of object storage.
- A training run, when the workload gives tokens: 6 x params x tokens / (GPUs x peak x MFU)
  of GPU time, stretched by utilization; shown at the shared-cloud and target utilization and
  at the blueprint's expected one.

Compile prices the plan once (`Plan.cost`): `estimate` reads the plan's basis (its GPUs'
catalog figures and the preflight figures it carries), the target's price of its capacity and
the workload's sizing; a part that cannot be priced is None with a note saying what is missing.
"""

from __future__ import annotations

from collections.abc import Iterable

from rackform.plan.decode import DecodeBound
from rackform.plan.model import Basis
from rackform.plan.pricing import (
    UNPRICED,
    Cost,
    Gap,
    Line,
    Run,
    RunAt,
    TargetCost,
    TokenCost,
    src,
    token_cost,
)
from rackform.plan.sizing import Sizing, training_flops


def _storage(plan: Basis, sizing: Sizing) -> Line | None:
    w, f = plan.workload, plan.figures
    if w is None or sizing.checkpoint_gb is None:
        return None
    price = f.cost.storage_usd_per_gb_month
    size = sizing.checkpoint_gb * w.checkpoints_retained
    month = size * price.value
    # What the jobs keep there: the Slurm prolog hands them checkpoints_retained as their keep.
    where = f"in {plan.object_tier.url}" if plan.object_tier is not None else "in object storage"
    item = (
        f"{w.checkpoints_retained} checkpoints x {sizing.checkpoint_gb:,.0f} GB "
        f"({w.checkpoint_contents}) {where} at ${price.value:g}/GB-month"
    )
    return Line(item, month / f.cost.hours_per_month.value, month, src(price))


def _run(plan: Basis, usd_per_hour: float | None) -> Run | None:
    w, c = plan.workload, plan.figures.cost
    groups = [g for _, g in plan.gpu_groups]
    if plan.purpose != "training" or w is None or not groups:
        return None
    flops = training_flops(w, c.flops_per_param_token.value)
    if flops is None:
        return None
    peak = sum(g.gpus * g.gpu.bf16_dense_tflops.value for g in groups) * 1e12
    busy_hours = flops / (peak * c.mfu_fraction.value) / 3600
    u = plan.figures.utilization
    levels = [u.shared_cloud_fraction.value * 100, u.target_fraction.value * 100]
    if w.expected_utilization_pct is not None:
        levels.append(w.expected_utilization_pct)
    at = tuple(
        RunAt(
            pct,
            busy_hours / (pct / 100),
            None if usd_per_hour is None else busy_hours / (pct / 100) * usd_per_hour,
        )
        for pct in sorted(set(levels))
    )
    srcs = [c.flops_per_param_token, c.mfu_fraction, u.target_fraction]
    srcs += [g.gpu.bf16_dense_tflops for g in groups]
    gpus = sum(g.gpus for g in groups)
    return Run(w.tokens_b, flops, gpus, peak / 1e15, c.mfu_fraction.value * 100, at, src(*srcs))


def _gap(plan: Basis, usd_per_month: float | None, run: Run | None) -> Gap | None:
    w = plan.workload
    if w is None or w.expected_utilization_pct is None:
        return None
    target = plan.figures.utilization.target_fraction.value * 100
    expected = w.expected_utilization_pct
    share = max(0.0, 1 - expected / target)
    month = None if usd_per_month is None else usd_per_month * share
    run_usd = None
    if run is not None:
        by = {a.utilization_pct: a.usd for a in run.at}
        if by.get(expected) is not None and by.get(target) is not None:
            run_usd = max(0.0, by[expected] - by[target])
    return Gap(expected, target, month, run_usd)


ON_PAPER = "on paper: HBM-bandwidth bound"


def node_usd_per_hour(plan: Basis, compute_per_hour: float, gpus_per_node: int) -> float:
    """One node's share of the cluster's hourly compute cost, by its GPUs."""
    return compute_per_hour * gpus_per_node / max(plan.gpus, 1)


def cluster_usd_per_million(tokens: Iterable[TokenCost], counts: dict[str, int]) -> float | None:
    """The cluster's cost per million output tokens: every serving node's hourly cost over the
    tokens they generate in an hour together (`counts`: each node group's nodes); None where
    nothing is priced."""
    usd = rate = 0.0
    for t in tokens:
        n = counts.get(t.group, 0)
        usd += n * t.usd_per_node_hour
        rate += n * t.tokens_per_s * 3600
    return usd / rate * 1e6 if rate else None


def _tokens(
    plan: Basis, compute: float | None, decode: Iterable[DecodeBound]
) -> tuple[TokenCost, ...]:
    if compute is None:
        return ()
    return tuple(
        token_cost(d.group, node_usd_per_hour(plan, compute, d.gpus_per_node), d.tokens_per_s,
                   ON_PAPER)
        for d in decode
    )  # fmt: skip


def estimate(
    plan: Basis, capacity: TargetCost, sizing: Sizing, decode: Iterable[DecodeBound] = ()
) -> Cost:
    """`capacity`: the target's price of the plan's capacity (its compiler's `cost`); `decode`:
    each serving node group's decode bound, which prices its output tokens."""
    notes = list(capacity.notes)
    storage = _storage(plan, sizing)
    # A total with a part missing would read as the whole cost: leave it out instead.
    priced = bool(capacity.lines) and not any(n.startswith(UNPRICED) for n in notes)
    compute = sum(line.usd_per_hour for line in capacity.lines) if priced else None
    hours = plan.figures.cost.hours_per_month.value
    # The totals are every line's: per hour and per month add up the same lines.
    per_hour = month = None
    if compute is not None:
        per_hour = compute + (storage.usd_per_hour if storage else 0.0)
        month = per_hour * hours
    run = _run(plan, compute)  # a run pays for the capacity it keeps busy
    gap = _gap(plan, None if compute is None else compute * hours, run)
    return Cost(
        capacity.basis,
        "USD",
        hours,
        capacity.lines,
        storage,
        per_hour,
        month,
        capacity.spot_usd_per_hour_range,
        run,
        gap,
        tuple(notes),
        _tokens(plan, compute, decode),
    )


def _usd(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.2f}" if v < 100 else f"${v:,.0f}"


def render(cost: Cost, width: int = 100) -> list[str]:
    """The cost table as text lines (for `rackform plan` and `rackform validate`). A line that
    would pass `width` characters gets its source on the next line."""
    rows = [
        (ln.item, f"{_usd(ln.usd_per_hour)}/h", f"{_usd(ln.usd_per_month)}/mo", ln.source)
        for ln in (*cost.compute, *([cost.storage] if cost.storage else []))
    ]
    rows.append(("total", f"{_usd(cost.usd_per_hour)}/h", f"{_usd(cost.usd_per_month)}/mo", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = [f"cost ({cost.basis}, {cost.currency}, {cost.hours_per_month:g} h/month):"]
    for r in rows:
        line = f"  {r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}"
        if len(line) + 2 + len(r[3]) <= width:
            out.append(f"{line}  {r[3]}".rstrip())
        else:
            out += [line, f"    source: {r[3]}"]
    if cost.run is not None:
        r = cost.run
        out.append(
            f"  run: {r.tokens_b:g}B tokens = {r.flops:.3g} FLOPs on {r.gpus} GPUs "
            f"({r.peak_pflops:.3g} PFLOPS peak) at {r.mfu_pct:g}% MFU:"
        )
        for a in r.at:
            out.append(
                f"    at {a.utilization_pct:g}% utilization: {a.hours:,.0f} h "
                f"({a.hours / 24:,.1f} days), {_usd(a.usd)}"
            )
    if cost.utilization is not None:
        g = cost.utilization
        text = (
            f"  utilization: expected {g.expected_pct:g}% vs target {g.target_pct:g}%: "
            f"{_usd(g.usd_per_month)}/mo of idle capacity"
        )
        if g.run_usd is not None:
            text += f"; the run costs {_usd(g.run_usd)} more"
        out.append(text)
    for t in cost.tokens:
        out.append(
            f"  serving {t.group}: {_usd(t.usd_per_million_output_tokens)} per million output "
            f"tokens at {t.tokens_per_s:,.0f} tokens/s per node ({t.basis}; "
            f"{_usd(t.usd_per_node_hour)}/node-hour)"
        )
    out += [f"  note: {n}" for n in cost.notes]
    return out
