"""The validators' HTTP opener: urllib's, with redirects followed on the same origin (scheme,
host, port) only, so a request that carries a key (a serving engine's API key) never takes it to
another host, https to http included. The rule of rackform's own opener and of the node
bootstrap's; the validators run on nodes and import nothing of rackform, so they keep these few
lines of it. Standard library only."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.parse
import urllib.request


class RedirectRefused(urllib.error.URLError):
    """A redirect this opener does not follow; `reason` is the one line to show."""


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urllib.parse.urljoin(req.full_url, newurl)
        if origin(new) != origin(req.full_url):
            fp.close()
            shown = " to ".join(u.split("?")[0] for u in (req.full_url, new))
            raise RedirectRefused(
                f"refused a redirect ({code}) from {shown}: credentials are not sent to another host"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def urlopen(req: urllib.request.Request, timeout: float, context: ssl.SSLContext | None = None):
    """`req` opened with redirects followed on the same origin only."""
    https = [urllib.request.HTTPSHandler(context=context)] if context is not None else []
    return urllib.request.build_opener(SameOriginRedirects, *https).open(req, timeout=timeout)
