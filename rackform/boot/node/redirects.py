"""The node's HTTP opener: urllib's, with redirects followed on the same origin only, so a request
that carries a token never takes it to another host."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.parse
import urllib.request


class RedirectRefused(urllib.error.URLError):
    """A redirect this script does not follow; `reason` is the line to log."""


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, followed only on the same origin (scheme, host, port): every request
    this script makes carries a token (the report's bearer, IMDS's), which urllib's own handler
    would send to any host a redirect names, https to http included. The controller's own
    opener keeps the same rule; a node has nothing of rackform to import it from."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urllib.parse.urljoin(req.full_url, newurl)
        if _origin(new) != _origin(req.full_url):
            fp.close()
            shown = " to ".join(u.split("?")[0] for u in (req.full_url, new))
            raise RedirectRefused(
                f"refused a redirect ({code}) from {shown}: credentials are not sent to another host"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def urlopen(req: urllib.request.Request, timeout: float, context: ssl.SSLContext | None = None):
    """`req` opened with redirects followed on the same origin only; over TLS with `context`
    where given (the site's CA)."""
    https = [urllib.request.HTTPSHandler(context=context)] if context is not None else []
    return urllib.request.build_opener(SameOriginRedirects, *https).open(req, timeout=timeout)
