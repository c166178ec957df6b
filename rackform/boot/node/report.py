"""The node's report of its outcome to the controller's boot server: where to send it (the file
the user data wrote), each request signed with the node's own token (never sent itself), and
the post, tried again with a growing wait while the server cannot be reached."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from rackform.boot.node.log import log
from rackform.boot.node.redirects import RedirectRefused, urlopen

# Where to report the outcome, written by the user data where the node has a controller to
# report to: {"url", "token"} and the node's name, "node" (without it: the host name), and where
# the server is https with a certificate of the site's own CA, that CA bundle ("ca", PEM).
REPORT_TO = Path("/etc/rackform/report.json")
# How a request to the boot server says whose it is: `Authorization: Rackform-Node
# <node>:<signature>`.
AUTH_SCHEME = "Rackform-Node"
# Posting the report: this many tries, the waits between them doubling from the first up to
# the last (5 + 10 + 20 + 40 + 60 + 60 + 60 s: the controller may be away for four minutes).
REPORT_TRIES = 8
REPORT_BACKOFF_S = (5.0, 60.0)


def signature(token: str, method: str, target: str, body: bytes = b"") -> str:
    """The node's signature of one request to the boot server: HMAC-SHA256, keyed with its
    token, of the method, the request target (the URL's path) and the body's sha256. Whoever
    sees the request (plain HTTP) learns neither the token nor how to sign another body."""
    message = f"{method}\n{target}\n{hashlib.sha256(body).hexdigest()}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def authorization(node: str, token: str, method: str, target: str, body: bytes = b"") -> str:
    """The Authorization header of a request `node` makes with its `token`."""
    return f"{AUTH_SCHEME} {node}:{signature(token, method, target, body)}"


def tls_context(ca: str) -> ssl.SSLContext | None:
    """What an https request verifies the server against: the CA bundle `ca` (PEM) where the
    controller gave one, else the system's (None: urllib's default)."""
    return ssl.create_default_context(cadata=ca) if ca else None


def report_to(path: Path = REPORT_TO) -> dict | None:
    """Where this node reports, as the user data wrote it ({"url", "token", "node", "vars": its
    own inventory variables, "ca": the CA bundle for an https server, or ""}; the node defaults
    to the host name), or None where it was told of no controller (no file, as on an
    autoscaling group's nodes on AWS) or the file is unreadable (logged)."""
    try:
        to = json.loads(path.read_text(encoding="utf-8"))
        to = {
            "url": str(to["url"]).rstrip("/"),
            "token": str(to["token"]),
            "node": to.get("node"),
            "vars": dict(to.get("vars") or {}),
            "ca": str(to.get("ca") or ""),
        }
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log(f"{path} is unreadable ({exc}): no report is sent")
        return None
    return {**to, "node": to["node"] or socket.gethostname()}


def send_report(
    to: dict,
    report: dict,
    *,
    tries: int = REPORT_TRIES,
    backoff_s: tuple[float, float] = REPORT_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """POST `report` to the controller's boot server, as `to` says, signed with the node's
    token; True once it took it. A connection that fails, or an answer of 408 or 5xx, is tried
    again after a wait; a refusal (4xx: a wrong credential, a node the controller does not know,
    a report it does not take) is not. Never raises: the node's outcome does not depend on its
    report."""
    body = json.dumps({**report, "node": to["node"]}).encode()
    url = f"{to['url']}/report/{urllib.parse.quote(to['node'], safe='')}"
    target = urllib.parse.urlsplit(url).path
    headers = {
        "Authorization": authorization(to["node"], to["token"], "POST", target, body),
        "Content-Type": "application/json",
    }
    wait, longest = backoff_s
    for attempt in range(1, tries + 1):
        try:
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            context = tls_context(to.get("ca") or "")
            with urlopen(req, timeout=30, context=context) as answer:
                answer.read()
            log(f"reported {report['outcome']} to {to['url']} as {to['node']}")
            return True
        except urllib.error.HTTPError as exc:
            # The controller's words, as printable text: a log line is read on a terminal.
            said = exc.read(512).decode("utf-8", "replace").strip()
            why = f"{exc.code} {said.encode('unicode_escape').decode('ascii')}"
            if exc.code != 408 and exc.code < 500:
                log(f"the controller refused the report ({why}); not sending it again")
                return False
        except RedirectRefused as exc:
            log(f"reporting to {to['url']}: {exc.reason}; not sending it again")
            return False
        except (OSError, ValueError) as exc:  # ValueError: a URL urllib cannot use
            why = str(exc)
        if attempt == tries:
            log(f"could not report to {to['url']} ({why}) after {tries} tries; giving up")
            return False
        log(f"reporting to {to['url']}: {why}; trying again in {wait:.0f} s")
        sleep(wait)
        wait = min(wait * 2, longest)
    return False
