"""What a cluster costs, per hour and per month, and what a training run on it costs.

- AWS: instances x the catalog's price for the market: on-demand; spot as the on-demand price
  less the catalog's spot discount range (the catalog has no spot prices: the figure shown is
  the smaller discount, the range beside it); capacity blocks at the catalog's block price
  where it has one; reservations at the catalog's share of on-demand.
- Bare metal: hardware amortized over `amortize_months` plus electricity for whole servers.
- Colocation: the racks' committed kW x $/kW-month plus amortized hardware.
- Checkpoint storage: size x checkpoints retained x $/GB-month of durable object storage.
- A training run, when the workload gives tokens: 6 x params x tokens / (GPUs x peak x MFU)
  of GPU time, stretched by utilization; shown at the shared-cloud and target utilization and
  at the blueprint's expected one.

Every price carries its catalog source and date; a part that cannot be priced is None with a
note saying what the blueprint or catalog lacks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rackform.catalog import Figure
from rackform.preflight.base import Context
from rackform.preflight.sizing import checkpoint_gb, training_flops
from rackform.schema import AwsTarget, BareMetalTarget, ColocationTarget

UNPRICED = "no total"


def _src(*figs: Figure) -> str:
    return ", ".join(dict.fromkeys(f"{f.source.key} ({f.source.date})" for f in figs))


@dataclass(frozen=True)
class Line:
    item: str
    usd_per_hour: float
    usd_per_month: float
    source: str


@dataclass(frozen=True)
class RunAt:
    utilization_pct: float
    hours: float
    usd: float | None


@dataclass(frozen=True)
class Run:
    tokens_b: float
    flops: float
    gpus: int
    peak_pflops: float  # the cluster's dense BF16 peak
    mfu_pct: float
    at: tuple[RunAt, ...]
    source: str


@dataclass(frozen=True)
class Gap:
    expected_pct: float
    target_pct: float
    usd_per_month: float | None  # idle capacity paid for, against the target
    run_usd: float | None  # extra cost of the run at expected vs target utilization


@dataclass(frozen=True)
class Cost:
    basis: str
    currency: str
    hours_per_month: float
    compute: tuple[Line, ...]
    storage: Line | None
    usd_per_hour: float | None  # compute
    usd_per_month: float | None  # compute + storage
    spot_usd_per_hour_range: tuple[float, float] | None
    run: Run | None
    utilization: Gap | None
    notes: tuple[str, ...]

    def as_dict(self) -> dict:
        """JSON-ready: money and hours to the cent, nothing else changed."""
        return _rounded(asdict(self))


def _rounded(v):
    if isinstance(v, float):
        return round(v, 2) if abs(v) < 1e15 else float(f"{v:.6g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_rounded(x) for x in v]
    return v


def _aws(ctx: Context, t: AwsTarget, notes: list[str]) -> tuple[list[Line], tuple | None]:
    c, hours = ctx.figures.cost, ctx.figures.cost.hours_per_month.value
    lines, lo, hi = [], 0.0, 0.0
    for g in ctx.spec.node_groups:
        it = ctx.catalog.instance(g.instance_type)
        od = it.on_demand_usd_hr
        what = f"{g.count} x {it.key} {t.market}"
        if t.market == "on-demand":
            price, src = od.value, _src(od)
        elif t.market == "spot":
            price = od.value * (1 - c.spot_discount_low.value)
            lo += g.count * od.value * (1 - c.spot_discount_high.value)
            hi += g.count * price
            what += f" (on-demand less {c.spot_discount_low.value:.0%})"
            src = _src(od, c.spot_discount_low)
        elif t.market == "reservation":
            price = od.value * c.reservation_rate_of_on_demand.value
            src = _src(od, c.reservation_rate_of_on_demand)
        else:  # capacity-block
            if it.capacity_block_usd_hr is None:
                notes.append(f"{UNPRICED}: the catalog has no capacity-block price for {it.key}")
                return [], None
            price, src = it.capacity_block_usd_hr.value, _src(it.capacity_block_usd_hr)
        lines.append(Line(what, g.count * price, g.count * price * hours, src))
        if g.max_count is not None and g.max_count > g.count:
            notes.append(
                f"{g.name} autoscales to {g.max_count} nodes: up to "
                f"${g.max_count * price * hours:,.0f}/month"
            )
    if t.market == "spot":
        notes.append(
            f"spot prices vary; the catalog's discount range "
            f"{c.spot_discount_low.value:.0%}-{c.spot_discount_high.value:.0%} gives "
            f"${lo:,.2f}-${hi:,.2f}/hour"
        )
    return lines, ((lo, hi) if t.market == "spot" else None)


def _hardware(ctx: Context, capex: float | None, months: int, notes: list[str]) -> list[Line]:
    hours = ctx.figures.cost.hours_per_month.value
    if capex is None:
        notes.append(f"{UNPRICED}: no target.capex_usd_per_gpu, so hardware is not priced")
        return []
    month = capex * ctx.gpus / months
    item = f"{ctx.gpus} GPUs x ${capex:,.0f} over {months} months"
    return [Line(item, month / hours, month, "target.capex_usd_per_gpu")]


def _bare_metal(ctx: Context, t: BareMetalTarget, notes: list[str]) -> list[Line]:
    lines = _hardware(ctx, t.capex_usd_per_gpu, t.amortize_months, notes)
    if t.power_usd_per_kwh is None:
        notes.append(f"{UNPRICED}: no target.power_usd_per_kwh, so electricity is not priced")
        return lines
    factor = ctx.figures.power.server_power_factor
    kw = sum(g.gpus * m.power_w.value for _, g, m in ctx.gpu_groups) / 1000 * factor.value
    per_hour = kw * t.power_usd_per_kwh
    hours = ctx.figures.cost.hours_per_month.value
    srcs = [m.power_w for _, _, m in ctx.gpu_groups] + [factor]
    item = f"{kw:.1f} kW (GPUs x{factor.value:g} for servers) at ${t.power_usd_per_kwh:g}/kWh"
    return [*lines, Line(item, per_hour, per_hour * hours, _src(*srcs))]


def _colocation(ctx: Context, t: ColocationTarget, notes: list[str]) -> list[Line]:
    hours = ctx.figures.cost.hours_per_month.value
    lines = []
    if t.usd_per_kw_month is None:
        notes.append(f"{UNPRICED}: no target.usd_per_kw_month, so space and power are not priced")
    else:
        kw = sum(r.power_kw for r in t.racks)
        month = kw * t.usd_per_kw_month
        item = f"{kw:g} kW committed in {len(t.racks)} rack(s) at ${t.usd_per_kw_month:g}/kW-month"
        lines.append(Line(item, month / hours, month, "target.usd_per_kw_month"))
    return lines + _hardware(ctx, t.capex_usd_per_gpu, t.amortize_months, notes)


def _storage(ctx: Context) -> Line | None:
    w = ctx.blueprint.workload
    if w is None or w.method == "serve":
        return None
    price = ctx.figures.cost.storage_usd_per_gb_month
    size = checkpoint_gb(w, ctx.figures.memory) * w.checkpoints_retained
    month = size * price.value
    item = (
        f"{w.checkpoints_retained} checkpoints x {size / w.checkpoints_retained:,.0f} GB "
        f"({w.checkpoint_contents}) in object storage at ${price.value:g}/GB-month"
    )
    return Line(item, month / ctx.figures.cost.hours_per_month.value, month, _src(price))


def _run(ctx: Context, usd_per_hour: float | None) -> Run | None:
    w, c = ctx.blueprint.workload, ctx.figures.cost
    if not ctx.training or w is None or not ctx.gpu_groups:
        return None
    flops = training_flops(w, c.flops_per_param_token.value)
    if flops is None:
        return None
    peak = sum(g.gpus * m.bf16_dense_tflops.value for _, g, m in ctx.gpu_groups) * 1e12
    busy_hours = flops / (peak * c.mfu_fraction.value) / 3600
    u = ctx.figures.utilization
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
    srcs += [m.bf16_dense_tflops for _, _, m in ctx.gpu_groups]
    return Run(
        w.tokens_b, flops, ctx.gpus, peak / 1e15, c.mfu_fraction.value * 100, at, _src(*srcs)
    )


def _gap(ctx: Context, usd_per_month: float | None, run: Run | None) -> Gap | None:
    w = ctx.blueprint.workload
    if w is None or w.expected_utilization_pct is None:
        return None
    target = ctx.figures.utilization.target_fraction.value * 100
    expected = w.expected_utilization_pct
    share = max(0.0, 1 - expected / target)
    month = None if usd_per_month is None else usd_per_month * share
    run_usd = None
    if run is not None:
        by = {a.utilization_pct: a.usd for a in run.at}
        if by.get(expected) is not None and by.get(target) is not None:
            run_usd = max(0.0, by[expected] - by[target])
    return Gap(expected, target, month, run_usd)


def estimate(ctx: Context) -> Cost:
    t, notes = ctx.blueprint.target, []
    spot = None
    if isinstance(t, AwsTarget):
        compute, spot = _aws(ctx, t, notes)
        basis = f"aws {t.market}"
    elif isinstance(t, BareMetalTarget):
        compute, basis = _bare_metal(ctx, t, notes), "bare metal (amortized)"
    else:
        compute, basis = _colocation(ctx, t, notes), "colocation"
    storage = _storage(ctx)
    # A total with a part missing would read as the whole cost: leave it out instead.
    priced = bool(compute) and not any(n.startswith(UNPRICED) for n in notes)
    per_hour = sum(line.usd_per_hour for line in compute) if priced else None
    hours = ctx.figures.cost.hours_per_month.value
    month = None
    if per_hour is not None:
        month = per_hour * hours + (storage.usd_per_month if storage else 0.0)
    run = _run(ctx, per_hour)
    gap = _gap(ctx, None if per_hour is None else per_hour * hours, run)
    return Cost(
        basis, "USD", hours, tuple(compute), storage, per_hour, month, spot, run, gap, tuple(notes)
    )


def _usd(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.2f}" if v < 100 else f"${v:,.0f}"


def render(cost: Cost) -> list[str]:
    """The cost table as text lines (for `rackform plan` and `rackform validate`)."""
    rows = [
        (ln.item, f"{_usd(ln.usd_per_hour)}/h", f"{_usd(ln.usd_per_month)}/mo", ln.source)
        for ln in (*cost.compute, *([cost.storage] if cost.storage else []))
    ]
    rows.append(("total", f"{_usd(cost.usd_per_hour)}/h", f"{_usd(cost.usd_per_month)}/mo", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = [f"cost ({cost.basis}, {cost.currency}, {cost.hours_per_month:g} h/month):"]
    for r in rows:
        out.append(
            f"  {r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip()
        )
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
    out += [f"  note: {n}" for n in cost.notes]
    return out
