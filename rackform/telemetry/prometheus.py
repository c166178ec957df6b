"""A Prometheus HTTP API client for instant queries: just enough for reap and heal, with every
way the server can fail turned into one `TelemetryError` line (unreachable, too slow, an error answer,
something that is not Prometheus's JSON).

Prometheus behind auth (a reverse proxy, or Prometheus's own web config): a bearer token from
$RACKFORM_PROMETHEUS_TOKEN, or basic auth from $RACKFORM_PROMETHEUS_USER and
$RACKFORM_PROMETHEUS_PASSWORD; an https URL is verified against the system's CAs or the file in
$RACKFORM_PROMETHEUS_CA (or --prometheus-ca); a user:password in the URL is basic auth too
(where the variables give none). Credentials go into the Authorization header only, never into
a message, and never to another host: a redirect elsewhere is refused."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from rackform import http_opener
from rackform.noanswer import no_answer
from rackform.printable import printable


class TelemetryError(Exception):
    """Prometheus could not answer; nothing may be decided from it."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


TOKEN_ENV = "RACKFORM_PROMETHEUS_TOKEN"
USER_ENV = "RACKFORM_PROMETHEUS_USER"
PASSWORD_ENV = "RACKFORM_PROMETHEUS_PASSWORD"
CA_ENV = "RACKFORM_PROMETHEUS_CA"


def _auth_header(environ: dict[str, str]) -> dict[str, str]:
    token = environ.get(TOKEN_ENV)
    if token:
        return {"Authorization": f"Bearer {token}"}
    user = environ.get(USER_ENV)
    if user:
        return http_opener.basic_auth(user, environ.get(PASSWORD_ENV, ""))
    return {}


class Prometheus:
    def __init__(
        self,
        url: str,
        timeout_s: float = 30.0,
        ca_file: str | None = None,
        environ: dict[str, str] | None = None,
    ):
        url, in_url = http_opener.split_userinfo(url)
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise TelemetryError(f"--prometheus {http_opener.shown(url)!r} is not an http(s) URL")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        environ = dict(os.environ) if environ is None else environ
        self._headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            **(_auth_header(environ) or in_url),
        }
        ca_file = ca_file or environ.get(CA_ENV) or None
        self._ssl = None
        if ca_file:
            try:
                self._ssl = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise TelemetryError(f"cannot use the CA file {ca_file}: {exc}") from None

    def query(self, expr: str, at: float) -> list[Sample]:
        """An instant query at unix time `at`; its vector as samples. POST, because a batch of
        clusters makes a long expression."""
        return _vector(self._post(expr, at), self.url)

    def query_range(self, expr: str, at: float) -> list[tuple[dict[str, str], list[tuple]]]:
        """An instant query of a range expression (a subquery): each series' (time, value)s."""
        return _matrix(self._post(expr, at), self.url)

    def _post(self, expr: str, at: float) -> bytes:
        body = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"}).encode()
        req = urllib.request.Request(f"{self.url}/api/v1/query", data=body, headers=self._headers)
        try:
            with http_opener.urlopen(req, timeout=self.timeout_s, context=self._ssl) as r:
                return r.read()
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                how = (
                    "with the credentials given"
                    if "Authorization" in self._headers
                    else (
                        f"without credentials (set {TOKEN_ENV}, or {USER_ENV} and {PASSWORD_ENV})"
                    )
                )
                raise TelemetryError(
                    f"Prometheus at {self.url} refused the query {how} (HTTP {exc.code})"
                ) from None
            raise TelemetryError(
                f"Prometheus at {self.url} answered HTTP {exc.code}: {_error_of(exc.read())}"
            ) from None
        except OSError as exc:  # a URLError, or a timeout while reading the answer
            raise TelemetryError(
                no_answer(f"Prometheus at {self.url}", exc, self.timeout_s)
            ) from None


def _error_of(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
        return printable(str(doc.get("error") or doc)[:200])
    except ValueError:
        return printable(raw[:200].decode(errors="replace").strip()) or "(empty)"


def _result(raw: bytes, url: str, kind: str, read):
    try:
        doc = json.loads(raw)
        if doc.get("status") != "success":
            raise TelemetryError(
                f"Prometheus at {url} answered an error: {printable(str(doc.get('error')))}"
            )
        data = doc["data"]
        if data["resultType"] != kind:
            raise TelemetryError(
                f"Prometheus at {url} answered a {data['resultType']}, not a {kind}"
            )
        return [read(s) for s in data["result"]]
    except TelemetryError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        head = raw[:80].decode(errors="replace").strip()
        raise TelemetryError(
            f"Prometheus at {url} answered something that is not its query API's JSON: {head!r}"
        ) from None


def _vector(raw: bytes, url: str) -> list[Sample]:
    return _result(raw, url, "vector", lambda s: Sample(dict(s["metric"]), float(s["value"][1])))


def _matrix(raw: bytes, url: str) -> list[tuple[dict[str, str], list[tuple]]]:
    return _result(
        raw,
        url,
        "matrix",
        lambda s: (dict(s["metric"]), [(float(t), float(v)) for t, v in s["values"]]),
    )
