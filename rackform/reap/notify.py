"""The `notify` action, the warning every other action gives first, and the note it leaves: an
alert posted to Alertmanager's API (`POST /api/v2/alerts`), or the decision as JSON to a
webhook. After an action that takes a cluster's exporters down (power-off, stop, destroy,
scale-to-zero), a silence (`POST /api/v2/silences`) keeps the exporter-down and GPUs-missing
alerts for that cluster from paging anyone.

An Alertmanager or webhook behind basic auth takes it in the URL (`https://user:pass@am:9093`,
as amtool does): sent as the Authorization header, never shown (a message, the audit log and
the decision name Alertmanager by its URL without it, a webhook by its origin only, for a
webhook's path is often its secret), and never sent to another host (a redirect elsewhere is
refused: `http_opener`)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime

from rackform import http_opener
from rackform.lifecycle.outcome import Outcome
from rackform.printable import printable
from rackform.reap.verdict import Decision
from rackform.telemetry import labels as L

ALERT = "RackformIdleCluster"
WARNING = "RackformIdleClusterWarning"
# The alerts (rackform.alerts.rules) an action that powers the cluster off would fire.
SILENCED = ("RackformDcgmExporterDown", "RackformGpuMissing")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def alert(d: Decision, now: float, warning: bool = False) -> dict:
    usd = "unpriced" if d.idle_usd is None else f"${d.idle_usd:,.2f}"
    util = "n/a" if d.util_avg is None else f"{d.util_avg:.1f}%"
    summary = (
        f"{d.cluster} ({d.environment}) is {d.measured or d.verdict}: "
        f"{util} GPU utilization over {d.window_min}m"
    )
    if warning:
        summary += f"; rackform reap will {d.action} it after the grace period unless it is used"
    return {
        "labels": {
            "alertname": WARNING if warning else ALERT,
            L.CLUSTER: d.cluster,
            L.ENVIRONMENT: d.environment,
            L.PURPOSE: d.purpose,
            "verdict": d.measured or d.verdict,
            "severity": "warning",
        },
        "annotations": {
            "summary": summary,
            "description": "; ".join(d.reasons),
            "idle_gpu_hours": f"{d.idle_gpu_hours or 0:g}",
            "idle_usd": usd,
        },
        "startsAt": _iso(now),
        "endsAt": _iso(now + 3600),
    }


class Notifier:
    def __init__(self, alertmanager: str | None = None, webhook: str | None = None):
        self.alertmanager = alertmanager.rstrip("/") if alertmanager else None
        self.webhook = webhook

    @property
    def configured(self) -> bool:
        return bool(self.alertmanager or self.webhook)

    def send(self, d: Decision, now: float | None = None, warning: bool = False) -> Outcome:
        now = time.time() if now is None else now
        if self.alertmanager:
            url, body = f"{self.alertmanager}/api/v2/alerts", [alert(d, now, warning)]
            return _post(url, body)
        if self.webhook:
            kind = "warning" if warning else "decision"
            body = {"rackform": "reap", "kind": kind, "decision": d.as_dict()}
            return _post(self.webhook, body, subject=_webhook(self.webhook))
        return Outcome("notify", False, "no --alertmanager or --webhook to notify")

    def silence(self, d: Decision, now: float, seconds: float) -> Outcome:
        """Silence the alerts a powered-off cluster raises (exporters down, GPUs missing)."""
        assert self.alertmanager
        body = {
            "matchers": [
                {"name": L.CLUSTER, "value": d.cluster, "isRegex": False, "isEqual": True},
                {"name": L.ENVIRONMENT, "value": d.environment, "isRegex": False, "isEqual": True},
                {
                    "name": "alertname",
                    "value": "|".join(SILENCED),
                    "isRegex": True,
                    "isEqual": True,
                },
            ],
            "startsAt": _iso(now),
            "endsAt": _iso(now + seconds),
            "createdBy": "rackform reap",
            "comment": f"{d.action} by rackform reap: its exporters are down on purpose",
        }
        return _post(f"{self.alertmanager}/api/v2/silences", body)


def _webhook(url: str) -> str:
    """A webhook as an outcome names it: its origin (its path may be its secret)."""
    parts = urllib.parse.urlsplit(http_opener.shown(url))
    return f"webhook at {parts.scheme}://{parts.netloc}"


def _post(url: str, body: object, subject: str | None = None) -> Outcome:
    url, auth = http_opener.split_userinfo(url)
    subject = subject or http_opener.shown(url)
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **auth},
        method="POST",
    )
    try:
        with http_opener.urlopen(req, timeout=10) as r:
            return Outcome(subject, True, f"HTTP {r.status}")
    except urllib.error.HTTPError as exc:
        answer = printable(exc.read()[:200].decode(errors="replace"))
        return Outcome(subject, False, f"HTTP {exc.code}: {answer}")
    except http_opener.RedirectRefused as exc:
        return Outcome(subject, False, str(exc.reason))
    except (urllib.error.URLError, OSError) as exc:
        return Outcome(subject, False, f"unreachable: {getattr(exc, 'reason', exc)}")
