"""What AWS capacity costs: the catalog's price of each node group's instance type in the
blueprint's region, for the group's market (on-demand, spot as a discount range, a
reservation's rate, a capacity block's own price). A region the catalog has no price for, or a
type AWS publishes no price of for the market, is left unpriced, never priced from another
region or market."""

from __future__ import annotations

from rackform.plan.model import Basis
from rackform.plan.pricing import UNPRICED, Line, TargetCost, src


def basis(plan: Basis) -> str:
    """The markets the cost is for: the target's, or each market its groups buy in."""
    markets = list(dict.fromkeys(g.market or plan.target.market for g in plan.node_groups))
    if markets == [plan.target.market] or not markets:
        return f"aws {plan.target.market}"
    return f"aws {' + '.join(markets)}"


def cost(plan: Basis) -> TargetCost:
    t, c = plan.target, plan.figures.cost
    name = basis(plan)
    hours = c.hours_per_month.value
    lines, lo, hi = [], 0.0, 0.0
    notes = _quotas(plan)  # whatever the prices, the quotas the groups need
    unpriced = sorted(
        {g.instance.key for g in plan.node_groups if t.region not in g.instance.priced_in}
    )
    for key in unpriced:
        where = ", ".join(
            next(g for g in plan.node_groups if g.instance.key == key).instance.priced_in
        )
        notes.append(
            f"{UNPRICED}: the catalog has no price for {key} in "
            f"{t.region} (it prices {where or 'no region'}); another region's price is not used"
        )
    # The groups it can price keep their lines (a total needs every group: see cost.py).
    spot = False
    for g in plan.node_groups:
        it = g.instance
        if it.key in unpriced:
            continue
        od = it.on_demand_usd_hr
        market = g.market or t.market
        what = f"{g.count} x {it.key} {market}"
        if market != "capacity-block" and od is None:
            notes.append(f"{UNPRICED}: the catalog has no {market} price for {it.key}")
            continue
        if market == "on-demand":
            price, where = od.value, src(od)
        elif market == "spot":
            spot = True
            price = od.value * (1 - c.spot_discount_low.value)
            lo += g.count * od.value * (1 - c.spot_discount_high.value)
            hi += g.count * price
            what += f" (on-demand less {c.spot_discount_low.value:.0%})"
            where = src(od, c.spot_discount_low)
        elif market == "reservation":
            price = od.value * c.reservation_rate_of_on_demand.value
            where = src(od, c.reservation_rate_of_on_demand)
        else:  # capacity-block
            if it.capacity_block_usd_hr is None:
                notes.append(f"{UNPRICED}: the catalog has no capacity-block price for {it.key}")
                continue
            price, where = it.capacity_block_usd_hr.value, src(it.capacity_block_usd_hr)
        if market != "spot":  # the spot range below covers the whole cluster's compute
            lo, hi = lo + g.count * price, hi + g.count * price
        lines.append(Line(what, g.count * price, g.count * price * hours, where))
        if g.max_count is not None and g.max_count > g.count:
            notes.append(
                f"{g.name} autoscales to {g.max_count} nodes: up to "
                f"${g.max_count * price * hours:,.0f}/month"
            )
    lines += _fsx(plan, notes)
    if not spot or any(n.startswith(UNPRICED) for n in notes):  # no range for part of it
        return TargetCost(name, tuple(lines), None, tuple(notes))
    notes.append(
        f"spot prices vary; the catalog's discount range "
        f"{c.spot_discount_low.value:.0%}-{c.spot_discount_high.value:.0%} gives "
        f"${lo:,.2f}-${hi:,.2f}/hour"
    )
    return TargetCost(name, tuple(lines), (lo, hi), tuple(notes))


def _quotas(plan: Basis) -> list[str]:
    """The vCPU-counted Service Quotas a group's market draws on, where the catalog knows its
    instance type's codes (capacity blocks and reservations draw on none): an account's value
    is its own, so the plan says what to ask for, not whether it is there."""
    out = []
    for g in plan.node_groups:
        it, market = g.instance, g.market or plan.target.market
        code = (it.quota_codes or {}).get(market)
        if code is None or it.vcpus is None:
            continue
        vcpus = int(it.vcpus.value) * g.max_nodes
        out.append(
            f"{g.name}: {market} {it.key} draws {vcpus:,} vCPUs on AWS quota {code} "
            f"({it.quota_source.url}); ask for it in Service Quotas before `up`"
        )
    return out


def _fsx(plan: Basis, notes: list[str]) -> list[Line]:
    """The FSx for Lustre file system the stack creates (storage.shared.fsx): its provisioned
    capacity at the catalog's price for its deployment type and throughput. One named by id is
    not this stack's to price; it is said so."""
    if plan.shared is not None and plan.shared.efs is not None:
        # EFS bills what it holds (and, elastic, each GB read and written), not a provisioned
        # size: nothing the blueprint says gives its month.
        notes.append("the EFS shared tier is billed by what it holds and moves: not priced")
        return []
    fsx = plan.shared.fsx if plan.shared is not None else None
    if fsx is None:
        return []
    if fsx.file_system_id:
        notes.append(f"the shared tier {fsx.file_system_id} is not created here: not priced")
        return []
    price = plan.figures.shared.fsx_usd_per_gb_month
    per_gb = price.value.get(fsx.deployment, {}).get(fsx.per_tib)
    if per_gb is None:
        notes.append(f"the catalog has no FSx price for {fsx.deployment} at {fsx.per_tib} MB/s/TiB")
        return []
    gb = round(fsx.storage_tib * 1000)  # FSx's "1.2 TiB" is 1,200 GiB, billed as 1,200 GB
    month = gb * per_gb
    what = (
        f"FSx for Lustre {fsx.deployment} {gb:,} GB x {fsx.per_tib} MB/s/TiB"
        f" at ${per_gb:g}/GB-month"
    )
    return [Line(what, month / plan.figures.cost.hours_per_month.value, month, src(price))]
