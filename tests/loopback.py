"""Loopback helpers for tests: a free port, and an HTTP server on 127.0.0.1 for the length of a
`with` block (nothing listens beyond loopback)."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (the probing socket is closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
