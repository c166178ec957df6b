"""The `notify` action, and the note every other action leaves: an alert posted to
Alertmanager's API (`POST /api/v2/alerts`), or the decision as JSON to a webhook."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

from rackform.reap import labels as L
from rackform.reap.target import Outcome
from rackform.reap.verdict import Decision

ALERT = "RackformIdleCluster"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def alert(d: Decision, now: float) -> dict:
    usd = "unpriced" if d.idle_usd is None else f"${d.idle_usd:,.2f}"
    util = "n/a" if d.util_avg is None else f"{d.util_avg:.1f}%"
    return {
        "labels": {
            "alertname": ALERT,
            L.CLUSTER: d.cluster,
            L.ENVIRONMENT: d.environment,
            L.PURPOSE: d.purpose,
            "verdict": d.measured or d.verdict,
            "severity": "warning",
        },
        "annotations": {
            "summary": f"{d.cluster} ({d.environment}) is {d.measured or d.verdict}: "
            f"{util} GPU utilization over {d.window_min}m",
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

    def send(self, d: Decision, now: float | None = None) -> Outcome:
        now = time.time() if now is None else now
        if self.alertmanager:
            url, body = f"{self.alertmanager}/api/v2/alerts", [alert(d, now)]
        elif self.webhook:
            url, body = self.webhook, {"rackform": "reap", "decision": d.as_dict()}
        else:
            return Outcome("notify", False, "no --alertmanager or --webhook to notify")
        req = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return Outcome(url, True, f"HTTP {r.status}")
        except urllib.error.HTTPError as exc:
            return Outcome(
                url, False, f"HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}"
            )
        except (urllib.error.URLError, OSError) as exc:
            return Outcome(url, False, f"unreachable: {getattr(exc, 'reason', exc)}")
