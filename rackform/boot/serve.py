"""The controller's boot server: each node that configures itself at boot fetches its pinned
artifact here and posts its report here, so the controller's work per node is serving one file
and reading one report.

    GET  /artifact/<sha256>   an artifact, only by the digest the nodes' user data pins (each
                              node group has its own; any other digest: 404)
    POST /report/<node>       the node's report (rackform/boot/reports.py says what one is),
                              written to `<reports>/<node>.json` whole (a new file renamed over
                              the old: a second report replaces the first, never half of it)

Every request carries the cluster's bearer token (`Authorization: Bearer <token>`; none: 401,
another: 403, compared with `secrets.compare_digest`). A report is refused, and nothing written,
when its body is over `MAX_REPORT_BYTES` (413, judged from Content-Length before the body is
read), has no Content-Length (411), is not a report (400), names another node than its URL
(400), or is for a node the server was not given (404; a name that is no node name, such as
`../x`, never reaches the file system). One request per connection (`Connection: close`), with a
read deadline, so a client that stalls holds its socket for `READ_TIMEOUT_S` at most.

Design, from measurement (benchmarks/boot_load.py; the figures and the extrapolation to real
nodes: docs/operations/scale.md): one asyncio event loop on the standard library's streams, no
new dependency. 4,096 nodes arrive at once: an event loop holds 4,096 sockets, where a thread
per connection (http.server's ThreadingHTTPServer) would hold 4,096 threads and their stacks
(not measured). An artifact goes out with `loop.sendfile`: the kernel's sendfile(2) from its
one open file, no copy through Python and no per-connection buffer of it. Against writing it in
`CHUNK` pieces from memory, each drained before the next (what a transport without sendfile
gets), sendfile measured 1.1 CPU-ms and 8 KiB of server memory per node at 4,096 nodes on
2 cores, the pieces 2.0 CPU-ms and 36 KiB. The listen backlog is `BACKLOG`: the default of 100
would drop the SYNs of a burst and have the nodes retry a second later (Linux caps it at
net.core.somaxconn, 4,096 on current kernels).

    python -m rackform.boot.serve --artifact A.tar.gz [--artifact B.tar.gz ...] \\
        --nodes NODES.txt --reports DIR \\
        --token-file TOKEN [--bind 127.0.0.1] [--port 0]

prints `listening on http://HOST:PORT` and serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import resource
import secrets
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rackform.boot.reports import MAX_REPORT_BYTES, ReportError, parse, path_of, valid_node

BACKLOG = 4096
HEADER_LIMIT = 16 * 1024  # request line and headers together
READ_TIMEOUT_S = 30.0  # to read a request, headers and body
SEND_TIMEOUT_S = 600.0  # to send the artifact (4,096 nodes sharing a 10 Gbit/s link: ~8 s)
CHUNK = 256 * 1024
# What a refused client may still send, read and dropped before the socket is closed.
LINGER_BYTES, LINGER_S = 1024 * 1024, 2.0
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
}


@dataclass(frozen=True)
class Served:
    """One artifact the server holds: the open file sendfile sends from, and its bytes, which
    its digest was taken from (and the fallback sends)."""

    data: bytes
    file: BinaryIO


class BootServer:
    """Serves the artifacts `artifacts` (one, or each node group's) to, and takes the reports
    of, the nodes `nodes`."""

    def __init__(
        self, artifacts: Path | Iterable[Path], nodes: Iterable[str], reports: Path, token: str
    ):
        self.nodes = frozenset(nodes)
        bad = sorted(n for n in self.nodes if not valid_node(n))
        if bad:
            raise ValueError(f"not node names: {', '.join(map(repr, bad))}")
        if not token:
            raise ValueError("the boot server needs a token")
        self.token = token.encode()
        self.reports = reports
        self.served: dict[str, Served] = {}  # by sha256, in the order given
        try:
            for path in [artifacts] if isinstance(artifacts, Path) else artifacts:
                data = path.read_bytes()
                sha = hashlib.sha256(data).hexdigest()
                if sha not in self.served:
                    self.served[sha] = Served(data, path.open("rb"))
                    if os.fstat(self.served[sha].file.fileno()).st_size != len(data):
                        raise ValueError(f"{path} changed while it was read")
        except BaseException:
            self.close()
            raise
        if not self.served:
            raise ValueError("the boot server needs an artifact")
        self.statuses: Counter[int] = Counter()  # responses sent, by status

    @property
    def sha256(self) -> str:
        """The digest of the first artifact (of the only one, for a server of one)."""
        return next(iter(self.served))

    def close(self) -> None:
        for served in self.served.values():
            served.file.close()

    async def start(self, host: str, port: int = 0) -> asyncio.Server:
        self.reports.mkdir(parents=True, exist_ok=True)
        return await asyncio.start_server(
            self._connection, host, port, backlog=BACKLOG, limit=HEADER_LIMIT
        )

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    status, body = await self._request(reader)
            except TimeoutError:
                status, body = 408, b"request took too long\n"
            if status == 0:
                await self._send_artifact(writer, self.served[body.decode()])
            else:
                await self._respond(writer, status, body)
                if status >= 400:
                    await _linger(reader, writer)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away, or stopped reading the artifact
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _request(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        """(status, body) to answer; status 0: send the artifact whose digest is the body."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return 431, b"request head too large\n"
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, b"not an HTTP/1 request\n"
        method, target = parts[0], parts[1]
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return 401, b"a bearer token is required\n"
        if not secrets.compare_digest(given.strip().encode(), self.token):
            return 403, b"wrong token\n"
        kind, _, arg = target.lstrip("/").partition("/")
        if kind == "artifact":
            if method != "GET":
                return 405, b"GET the artifact\n"
            if arg not in self.served:
                return 404, b"no such artifact\n"
            return 0, arg.encode()
        if kind != "report":
            return 404, b"no such path\n"
        if method != "POST":
            return 405, b"POST a report\n"
        if arg not in self.nodes:
            return 404, f"{arg!r} is not a node of this cluster\n".encode()
        length = headers.get("content-length", "")
        if not length.isdigit():
            return 411, b"Content-Length is required\n"
        if int(length) > MAX_REPORT_BYTES:
            return 413, f"a report is at most {MAX_REPORT_BYTES} bytes\n".encode()
        try:
            report = parse(await reader.readexactly(int(length)), arg)
        except ReportError as exc:
            return 400, f"{exc}\n".encode()
        self._write(arg, report.to_json())
        return 200, b"recorded\n"

    def _write(self, node: str, text: str) -> None:
        path = path_of(self.reports, node)
        # A leading dot: never a node's name (they start with a letter or digit).
        tmp = path.with_name(f".{node}.{secrets.token_hex(6)}.part")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)

    async def _send_artifact(self, writer: asyncio.StreamWriter, served: Served) -> None:
        self.statuses[200] += 1
        size = len(served.data)
        writer.write(_head(200, size, "application/gzip"))
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(SEND_TIMEOUT_S):
            try:
                await loop.sendfile(writer.transport, served.file, 0, size, fallback=False)
            except (asyncio.SendfileNotAvailableError, NotImplementedError):
                view = memoryview(served.data)
                for i in range(0, len(view), CHUNK):
                    writer.write(view[i : i + CHUNK])
                    await writer.drain()

    async def _respond(self, writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        self.statuses[status] += 1
        extra = "WWW-Authenticate: Bearer\r\n" if status == 401 else ""
        writer.write(_head(status, len(body), "text/plain; charset=utf-8", extra) + body)
        await writer.drain()


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After a refusal: say no more is sent, and read (and drop) what the client still sends,
    a little of it for a little while, so that closing with its body unread does not reset the
    connection before the client has read why it was refused."""
    writer.write_eof()
    left = LINGER_BYTES
    async with asyncio.timeout(LINGER_S):
        while left > 0 and (chunk := await reader.read(min(left, 64 * 1024))):
            left -= len(chunk)


def _head(status: int, length: int, kind: str, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n{extra}\r\n"
    ).encode()


def open_files(need: int) -> int:
    """Raise this process's open-files limit (RLIMIT_NOFILE) to at least `need`, up to the hard
    limit; returns the new soft limit. A hard limit below `need` is refused (raising it needs
    root: `ulimit -Hn`, or LimitNOFILE= in a systemd unit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need or soft == resource.RLIM_INFINITY:
        return soft
    if hard != resource.RLIM_INFINITY and hard < need:
        raise OSError(
            f"{need} open files are needed and the hard limit is {hard}: raise it"
            " (ulimit -Hn as root, or LimitNOFILE= in the service's unit)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return need


@contextlib.contextmanager
def running(server: BootServer, host: str, port: int = 0) -> Iterator[str]:
    """`server` on its own event loop in a thread for the length of the block; yields its URL
    (`http://HOST:PORT`)."""
    loop = asyncio.new_event_loop()
    started = asyncio.run_coroutine_threadsafe(server.start(host, port), loop)
    thread = threading.Thread(target=loop.run_forever, name="boot-server", daemon=True)
    thread.start()
    try:
        listening = started.result(timeout=30)
        bound_host, bound_port = listening.sockets[0].getsockname()[:2]
        yield f"http://{bound_host}:{bound_port}"
    finally:
        if started.done() and not started.exception():

            async def stop() -> None:
                listening.close()
                await listening.wait_closed()

            asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
        server.close()


async def _serve_until_signalled(server: BootServer, host: str, port: int) -> None:
    listening = await server.start(host, port)
    bound_host, bound_port = listening.sockets[0].getsockname()[:2]
    print(f"listening on http://{bound_host}:{bound_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    listening.close()
    await listening.wait_closed()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--artifact", type=Path, action="append", required=True, help="repeat for several"
    )
    ap.add_argument("--nodes", type=Path, required=True, help="the node names, one a line")
    ap.add_argument("--reports", type=Path, required=True)
    ap.add_argument("--token-file", type=Path, required=True)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    nodes = args.nodes.read_text(encoding="utf-8").split()
    open_files(len(nodes) + 64)
    token = args.token_file.read_text(encoding="utf-8").strip()
    server = BootServer(args.artifact, nodes, args.reports, token)
    try:
        asyncio.run(_serve_until_signalled(server, args.bind, args.port))
    finally:
        server.close()
    print(f"responses: {dict(sorted(server.statuses.items()))}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
