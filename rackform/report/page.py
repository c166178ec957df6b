"""The report as one HTML page: every style and picture inside it (no stylesheet, script, font or
image fetched from anywhere), each cluster a section. Every value that came from a log, a
scheduler or Prometheus (names, notes) is escaped where it lands; the pictures are matplotlib's
SVG, whose text is drawn as paths."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from html import escape

from rackform.report import plots
from rackform.report.model import ClusterReport

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 60em; color: #1d2630; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccd; padding-bottom: .2em; }
table.figures td, table.figures th { padding: .2em .8em; text-align: left; }
table.figures th { font-weight: normal; color: #566; }
figure { margin: 1em 0; } figcaption { color: #566; font-size: .9em; }
figure svg { max-width: 100%; height: auto; }
.note { color: #8a5a00; font-size: .9em; }
"""


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:,.2f} h"


def _figure(caption: str, draw: Callable[[], str]) -> str:
    return f"<figure>{draw()}<figcaption>{escape(caption)}</figcaption></figure>"


def _missing(what: str) -> str:
    return f'<p class="note">{escape(what)}</p>'


def _figures(c: ClusterReport, now: float) -> list[tuple[str, str]]:
    r = c.reliability
    rows = [
        ("failures", f"{len(r.failures)} ({len(r.open)} not returned)"),
        ("mean time to repair", _hours(r.mttr_s)),
        ("mean time between failures", _hours(r.tbf_s)),
        ("failures a day", "-" if r.per_day(now) is None else f"{r.per_day(now):.3f}"),
        ("rolling changes' node-hours out", _hours(r.maintenance_seconds)),
    ]
    if c.utilization is not None:
        u = c.utilization
        mean = "-" if u.mean_pct is None else f"{u.mean_pct:.1f}%"
        rows += [
            ("mean GPU utilization", f"{mean} (target {u.target_pct:g}%)"),
            ("idle GPU-hours", f"{u.idle_gpu_hours:,.1f}"),
        ]
    if c.usage is not None:
        usd = "" if c.usage.usd is None else f", ${c.usage.usd:,.2f}"
        rows.append(("jobs", f"{len(c.usage.jobs)}: {c.usage.gpu_hours:,.1f} GPU-hours{usd}"))
    if c.goodput is not None and c.goodput.fraction is not None:
        rows.append(("goodput", f"{c.goodput.fraction:.1%}"))
    return rows


def section(c: ClusterReport, now: float) -> str:
    k = c.key
    out = [
        f'<section id="{escape(c.stack, quote=True)}">',
        f"<h2>{escape(k.cluster)} <small>({escape(k.environment)}, {escape(k.purpose)}, "
        f"{c.gpus} GPUs)</small></h2>",
        '<table class="figures">',
    ]
    out += [f"<tr><th>{escape(a)}</th><td>{escape(b)}</td></tr>" for a, b in _figures(c, now)]
    out.append("</table>")
    out += [_missing(n) for n in c.notes]
    if c.utilization is not None and c.utilization.util:
        out.append(_figure("Mean GPU utilization an hour against the target, and the idle "
                           "GPU-hours of each hour", lambda: plots.utilization(c.utilization)))  # fmt: skip
    if c.usage is not None and c.usage.jobs:
        out.append(
            _figure("Cost per job and per team (Slurm account)", lambda: plots.cost(c.usage))
        )
    r = c.reliability
    if r.failures:
        out.append(_figure("Failures detected a day, by cause", lambda: plots.failures(r)))
        out.append(_figure("Mean time to repair per node: detection to return to service",
                           lambda: plots.repairs(r)))  # fmt: skip
    else:
        out.append(_missing("no failure in the audit log"))
    if c.goodput is not None:
        out.append(_figure("GPU-hours lost by cause", lambda: plots.goodput(c.goodput)))
    out.append("</section>")
    return "\n".join(out)


def page(clusters: list[ClusterReport], now: float) -> str:
    when = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = "\n".join(section(c, now) for c in clusters)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        # Nothing may be fetched, whatever a value held: the browser refuses any load.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>rackform report</title><style>{STYLE}</style></head><body>"
        f"<h1>rackform report</h1><p>{escape(when)}: {len(clusters)} clusters.</p>\n"
        f"{body}\n</body></html>\n"
    )
