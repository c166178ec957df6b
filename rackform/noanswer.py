"""The one line a request to a server rackform reads over HTTP (Prometheus, a BMC's Redfish)
says when no HTTP answer came back: a timeout, an address that refuses or does not resolve, or
a redirect rackform's opener refused (`http_opener`). (An answer with an error
status is the caller's to explain: what 401 means depends on whom.)"""

from __future__ import annotations

import socket
import urllib.error

from rackform.http_opener import RedirectRefused


def no_answer(who: str, exc: OSError, timeout_s: float) -> str:
    """`exc`: what urlopen raised other than an HTTPError (a URLError, a TimeoutError or
    another OSError)."""
    if isinstance(exc, RedirectRefused):
        return f"{who}: {exc.reason}"
    why = getattr(exc, "reason", exc) if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(why, TimeoutError | socket.timeout):
        return f"{who} did not answer within {timeout_s:g} s"
    return f"{who} is unreachable: {why}"
