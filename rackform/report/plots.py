"""Each picture of a cluster's report as an SVG drawn by matplotlib, inline in the page: no file
beside it, no font or script fetched (text is drawn as paths). Labels that come from a log or a
scheduler (node, job and account names) are plain text to matplotlib: its math syntax is off,
so a `$` in a name is a `$`."""

from __future__ import annotations

import io
import re
from collections import Counter
from datetime import UTC, datetime

from matplotlib import rc_context
from matplotlib.figure import Figure

from rackform.lifecycle.repairs import Reliability
from rackform.report.model import Goodput, Utilization
from rackform.scheduler.usage import Usage

RC = {
    "text.parse_math": False,
    "svg.hashsalt": "rackform-report",  # the same page for the same data
    "svg.fonttype": "path",
    "font.size": 9,
}
MAX_BARS = 15  # jobs, teams or nodes a bar chart names (the largest)
BLUE, GREY, RED, GREEN = "#1f6fb4", "#9aa5b1", "#c0392b", "#2e8b57"


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buf.getvalue()
    # Inline in HTML: only the <svg> element (no XML declaration, doctype or metadata block).
    text = text[text.index("<svg") :]
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _figure(height: float = 2.6) -> Figure:
    return Figure(figsize=(7.5, height), layout="constrained")


def _short(label: str, limit: int = 28) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def utilization(u: Utilization) -> str:
    with rc_context(RC):
        fig = _figure(3.6)
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        top.plot([_when(t) for t, _ in u.util], [v for _, v in u.util], color=BLUE,
                 label="mean GPU utilization")  # fmt: skip
        top.axhline(u.target_pct, color=GREEN, linestyle="--", label=f"target {u.target_pct:g}%")
        top.set_ylim(0, 100)
        top.set_ylabel("%")
        top.legend(loc="lower left", fontsize=8)
        bottom.bar([_when(t) for t, _ in u.idle], [v for _, v in u.idle], width=1 / 24 * 0.9,
                   color=GREY, align="edge")  # fmt: skip
        bottom.set_ylabel(f"idle GPU-h\n(<{u.idle_below_pct:g}%)")
        fig.autofmt_xdate()
        return _svg(fig)


def cost(usage: Usage) -> str:
    """GPU-hours (and USD where the catalog prices the cluster) per job and per team (Slurm
    account), the largest first."""
    priced = usage.usd_per_gpu_hour is not None
    what = "USD" if priced else "GPU-hours"
    jobs = sorted(usage.jobs, key=lambda j: -j.gpu_hours)[:MAX_BARS]
    teams = usage.accounts[:MAX_BARS]
    with rc_context(RC):
        fig = _figure(0.9 + 0.22 * max(len(jobs), len(teams), 3))
        left, right = fig.subplots(1, 2)
        for ax, labels, values, title in (
            (left, [_short(f"{j.job.id} {j.job.user}") for j in jobs],
             [(j.usd if priced else j.gpu_hours) or 0.0 for j in jobs], f"{what} per job"),
            (right, [_short(a.account) for a in teams],
             [(a.usd if priced else a.gpu_hours) or 0.0 for a in teams], f"{what} per team"),
        ):  # fmt: skip
            ax.barh(range(len(values)), values, color=BLUE)
            ax.set_yticks(range(len(values)), labels)
            ax.invert_yaxis()
            ax.set_title(title)
        return _svg(fig)


def repairs(r: Reliability) -> str:
    """Each node's mean time to repair (hours), and how many of its failures are still open."""
    nodes = sorted(r.nodes(), key=lambda n: -(n.mttr_s or 0))[:MAX_BARS]
    with rc_context(RC):
        fig = _figure(0.9 + 0.22 * max(len(nodes), 3))
        ax = fig.subplots()
        hours = [(n.mttr_s or 0) / 3600 for n in nodes]
        ax.barh(range(len(nodes)), hours, color=BLUE)
        labels = [
            _short(n.node)
            + (f"  ({n.failures - n.repaired} open)" if n.failures > n.repaired else "")
            for n in nodes
        ]
        ax.set_yticks(range(len(nodes)), labels)
        ax.invert_yaxis()
        ax.set_xlabel("mean time to repair, detection to return (hours)")
        return _svg(fig)


def failures(r: Reliability) -> str:
    """Failures detected per day, by cause (heal's action, a ticket, a replacement, a failed
    rollout re-validation)."""
    days: dict[datetime, Counter[str]] = {}
    for f in r.failures:
        d = _when(f.detected).replace(hour=0, minute=0, second=0, microsecond=0)
        days.setdefault(d, Counter())[f.cause] += 1
    causes = sorted({c for cs in days.values() for c in cs})
    order = sorted(days)
    with rc_context(RC):
        fig = _figure()
        ax = fig.subplots()
        base = [0] * len(order)
        for cause in causes:
            counts = [days[d][cause] for d in order]
            ax.bar(order, counts, bottom=base, label=_short(cause), width=0.8)
            base = [b + c for b, c in zip(base, counts, strict=True)]
        ax.set_ylabel("failures a day")
        if causes:
            ax.legend(fontsize=8)
        fig.autofmt_xdate()
        return _svg(fig)


def goodput(g: Goodput) -> str:
    """The GPU-hours lost by cause, and where the paid GPU-hours are known the share that became
    training beside the 95% the best systems claim."""
    causes = sorted(g.lost, key=lambda c: -g.lost[c])
    with rc_context(RC):
        fig = _figure(0.9 + 0.22 * max(len(causes), 3))
        ax = fig.subplots()
        ax.barh(range(len(causes)), [g.lost[c] for c in causes], color=RED)
        ax.set_yticks(range(len(causes)), [_short(c) for c in causes])
        ax.invert_yaxis()
        ax.set_xlabel("GPU-hours lost")
        if g.fraction is not None:
            ax.set_title(f"goodput {g.fraction:.1%} of {g.paid_gpu_hours:,.0f} GPU-hours paid "
                         "(best systems claim 95%)")  # fmt: skip
        return _svg(fig)
