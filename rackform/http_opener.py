"""The one way rackform's clients open an HTTP(S) URL (Prometheus, a BMC's Redfish,
Alertmanager or a webhook): urllib's opener with a redirect handler that never carries a
credential to another origin.

urllib's own handler follows a 301/302/303/307/308 to any host and copies every header to the
new request, the Authorization header included, https to http included. Here:

- a redirect from https to http is refused, always;
- a redirect to another origin (scheme, host or port) is refused when the request carries
  credentials (`carries_credentials`: an Authorization, Proxy-Authorization or Cookie header, a
  header whose name says token, key, secret or password, a user:password in the URL, or a query
  parameter named like one), with one line that names both URLs (without their credentials);
- every other redirect is urllib's (same origin: followed with its headers; a POST's body is
  never sent again, which urllib already guarantees).

The nodes' scripts (the node's bootstrap, the user data's fetch, an image bake) import nothing
of rackform and keep their own few lines of the same rule, tested beside this.
"""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.parse
import urllib.request

# Header names (lowercase) that carry a credential; and words that make any other name one.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
CREDENTIAL_WORDS = ("token", "key", "secret", "password", "passwd", "signature", "credential")


class RedirectRefused(urllib.error.URLError):
    """A redirect this opener would not follow; `reason` is the one line to show."""


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`, the port made explicit for http and https."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def shown(url: str) -> str:
    """`url` as a message may show it: no user:password, query string or fragment."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port is not None else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _secret_name(name: str) -> bool:
    name = name.lower()
    return name in CREDENTIAL_HEADERS or any(w in name for w in CREDENTIAL_WORDS)


def carries_credentials(req: urllib.request.Request) -> bool:
    """Whether sending `req` again elsewhere could give a credential away."""
    headers = {**req.headers, **req.unredirected_hdrs}
    if any(_secret_name(k) for k in headers):
        return True
    parts = urllib.parse.urlsplit(req.full_url)
    if parts.username is not None or parts.password is not None:
        return True
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    return any(_secret_name(k) for k, _v in query)


class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler, refusing a downgrade and a credential's trip elsewhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urllib.parse.urljoin(req.full_url, newurl)
        old_origin, new_origin = origin(req.full_url), origin(new)
        why = None
        if old_origin[0] == "https" and new_origin[0] != "https":
            why = "a redirect from https to http is never followed"
        elif old_origin != new_origin and carries_credentials(req):
            why = "credentials are not sent to another host"
        if why is not None:
            fp.close()
            raise RedirectRefused(
                f"refused a redirect ({code}) from {shown(req.full_url)} to {shown(new)}: {why}"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def basic_auth(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """`url` without its user:password, and that as a Basic Authorization header ({} where
    the URL has none): what urllib cannot send from the URL itself, and what no message may
    show."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, {}
    netloc = parts.netloc.rpartition("@")[2]
    bare = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    return bare, basic_auth(user, password)


def urlopen(
    req: urllib.request.Request | str,
    *,
    timeout: float,
    context: ssl.SSLContext | None = None,
):
    """urllib.request.urlopen, with `SameOriginRedirects` in place of urllib's handler.
    Raises what urlopen raises, and RedirectRefused (a URLError) for a refused redirect."""
    handlers: list[urllib.request.BaseHandler] = [SameOriginRedirects()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers).open(req, timeout=timeout)
