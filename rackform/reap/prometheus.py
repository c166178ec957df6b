"""A Prometheus HTTP API client for instant queries: just enough for reap, with every way the
server can fail turned into one `TelemetryError` line (unreachable, too slow, an error answer,
something that is not Prometheus's JSON)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass


class TelemetryError(Exception):
    """Prometheus could not answer; nothing may be decided from it."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


class Prometheus:
    def __init__(self, url: str, timeout_s: float = 30.0):
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise TelemetryError(f"--prometheus {url!r} is not an http(s) URL")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def query(self, expr: str, at: float) -> list[Sample]:
        """An instant query at unix time `at`; its vector as samples. POST, because a batch of
        clusters makes a long expression."""
        body = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"}).encode()
        req = urllib.request.Request(
            f"{self.url}/api/v1/query",
            data=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            raise TelemetryError(
                f"Prometheus at {self.url} answered HTTP {exc.code}: {_error_of(exc.read())}"
            ) from None
        except TimeoutError:
            raise TelemetryError(
                f"Prometheus at {self.url} did not answer within {self.timeout_s:g} s"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", exc)
            if isinstance(why, TimeoutError | socket.timeout):
                raise TelemetryError(
                    f"Prometheus at {self.url} did not answer within {self.timeout_s:g} s"
                ) from None
            raise TelemetryError(f"Prometheus at {self.url} is unreachable: {why}") from None
        return _vector(raw, self.url)


def _error_of(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
        return str(doc.get("error") or doc)[:200]
    except ValueError:
        return raw[:200].decode(errors="replace").strip() or "(empty)"


def _vector(raw: bytes, url: str) -> list[Sample]:
    try:
        doc = json.loads(raw)
        if doc.get("status") != "success":
            raise TelemetryError(f"Prometheus at {url} answered an error: {doc.get('error')}")
        data = doc["data"]
        if data["resultType"] != "vector":
            raise TelemetryError(
                f"Prometheus at {url} answered a {data['resultType']}, not a vector"
            )
        return [Sample(dict(s["metric"]), float(s["value"][1])) for s in data["result"]]
    except TelemetryError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        head = raw[:80].decode(errors="replace").strip()
        raise TelemetryError(
            f"Prometheus at {url} answered something that is not its query API's JSON: {head!r}"
        ) from None
