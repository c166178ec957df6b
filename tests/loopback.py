"""An HTTP server on 127.0.0.1 for the length of a `with` block (tests only: nothing listens
beyond loopback)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def http_server(handler: Callable[..., http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve with `handler` on a free loopback port; yields the port, stops the server after."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
