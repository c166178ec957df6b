"""The controller's boot server: each node that configures itself at boot fetches its pinned
artifact here and posts its report here, so the controller's work per node is serving one file
and reading one report.

    GET  /artifact/<sha256>   an artifact, only by the digest the nodes' user data pins (each
                              node group has its own; any other digest: 404)
    POST /report/<node>       the node's report (`reports` says what one is),
                              written to `<reports>/<node>.json` whole (a new file, renamed
                              into place), once a round (below)

Every request is signed by the node that makes it, with its own token of the round
(`credentials`: `Authorization: Rackform-Node <node>:<signature>`; none or a
malformed one: 401; a node not of the round, a token of another round or of another node, an
altered request: 403).
A report is taken only from the node it is for (node A's credential posting for B: 403) and
once a round: a second report for the same node that is the same report (a retry whose answer
was lost, or a replay) is answered 200 and changes nothing; a different one is refused (409),
and the first stays. A report is refused, and nothing written, when its body is over
`MAX_REPORT_BYTES` (413, judged from Content-Length before the body is read), has no
Content-Length (411) or a malformed one (400), is not a report (400: not JSON, nested too
deep, a wrong field), names another node than its URL (400), or is for a node the server was not
given (404; a name that is no node name, such as `../x`, never reaches the file system).

Holding up the server: one request per connection (`Connection: close`); a request must arrive
within `HEAD_TIMEOUT_S` (its head) and `READ_TIMEOUT_S` (whole), and its head is at most
`HEADER_LIMIT` bytes (431). Connections are accepted under a cap below the open-files limit, and
at the cap the longest idle one (no complete request yet, or lingering after a refusal) is
closed to make room (`accept`). What goes wrong is said in one line on stderr, never a
traceback.

Transport: plain HTTP, or TLS where the site gives a certificate (`Tls`): the signatures make a
report the node's own and unaltered on either; only TLS keeps the artifact and the reports from
being read on the way (docs/operations/security.md, "Boot reports").

Design, from measurement (the boot-load benchmark; the figures and the extrapolation to real nodes:
docs/operations/scale.md): one asyncio event loop on the standard library's streams, no new
dependency. 4,096 nodes arrive at once: an event loop holds 4,096 sockets, where a thread per
connection (http.server's ThreadingHTTPServer) would hold 4,096 threads and their stacks (not
measured). An artifact goes out with `loop.sendfile`: the kernel's sendfile(2) from its one open
file, no copy through Python and no per-connection buffer of it. Against writing it in `CHUNK`
pieces from memory, each drained before the next (what a transport without sendfile gets, as a TLS
one), sendfile measured 1.1 CPU-ms and 8 KiB of server memory per node at 4,096 nodes on 2 cores,
the pieces 2.0 CPU-ms and 36 KiB. The listen backlog is `accept.BACKLOG`: the default of 100 would
drop the SYNs of a burst and have the nodes retry a second later (Linux caps it at
net.core.somaxconn, 4,096 on current kernels).

    python -m rackform.boot.serve --artifact A.tar.gz [--artifact B.tar.gz ...] \\
        --nodes NODES.txt --reports DIR --key-file KEY \\
        [--tls-cert CERT --tls-key KEY] [--bind 127.0.0.1] [--port 0]

prints `listening on http(s)://HOST:PORT` and serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import signal
import ssl
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from rackform.boot.accept import MAX_CONNECTIONS, Acceptor, Conn, Listening, open_files
from rackform.boot.credentials import Verifier, claim, key_from_text
from rackform.boot.node.report import AUTH_SCHEME
from rackform.boot.reports import MAX_REPORT_BYTES, ReportError, parse, path_of, valid_node

HEADER_LIMIT = 16 * 1024  # request line and headers together
HEAD_TIMEOUT_S = 10.0  # to send the request's head (and, with TLS, to shake hands)
READ_TIMEOUT_S = 30.0  # to read a request, head and body
SEND_TIMEOUT_S = 600.0  # to send the artifact (4,096 nodes sharing a 10 Gbit/s link: ~8 s)
CHUNK = 256 * 1024
# What a refused client may still send, read and dropped before the socket is closed.
LINGER_BYTES, LINGER_S = 1024 * 1024, 2.0
NOTES_PER_KIND = 5  # lines said on stderr per kind of trouble; the rest only counted
CONTENT_LENGTH = re.compile(r"[0-9]{1,10}")  # ASCII digits only ("²".isdigit() is True)
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


@dataclass(frozen=True)
class Served:
    """One artifact the server holds: the open file sendfile sends from, and its bytes, which
    its digest was taken from (and the fallback sends)."""

    data: bytes
    file: BinaryIO


@dataclass(frozen=True)
class Tls:
    """The site's certificate for the boot server (`cert`: the chain, PEM; `key`: its private
    key) and the CA bundle the nodes verify it against (`ca`; None: the nodes' own trust
    store)."""

    cert: Path
    key: Path
    ca: Path | None = None

    def context(self) -> ssl.SSLContext:
        """The server's side (ssl.SSLError, an OSError, where the files are not a pair)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context

    def ca_text(self) -> str:
        """The CA bundle for the nodes' user data ("" for none)."""
        return self.ca.read_text(encoding="utf-8") if self.ca else ""


class BootServer:
    """Serves the artifacts `artifacts` (one, or each node group's) to, and takes the reports
    of, the nodes `nodes`, each signing with its own token of the round whose key is `key`
    (`tls`: the server's TLS context; None: plain HTTP)."""

    def __init__(
        self,
        artifacts: Path | Iterable[Path],
        nodes: Iterable[str],
        reports: Path,
        key: bytes,
        *,
        tls: ssl.SSLContext | None = None,
        max_connections: int = MAX_CONNECTIONS,
    ):
        self.nodes = frozenset(nodes)
        bad = sorted(n for n in self.nodes if not valid_node(n))
        if bad:
            raise ValueError(f"not node names: {', '.join(map(repr, bad))}")
        if not isinstance(key, bytes):
            raise TypeError("the boot server's key is bytes (the round's key)")
        self.verifier = Verifier(key, self.nodes)
        self.reports = reports
        self.tls = tls
        self.acceptor = Acceptor(
            self._connection,
            self.note,
            tls=tls,
            limit=HEADER_LIMIT,
            handshake_timeout_s=HEAD_TIMEOUT_S,
            max_connections=max_connections,
        )
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
        self.notes: Counter[str] = Counter()  # trouble, by kind (said NOTES_PER_KIND times)

    @property
    def sha256(self) -> str:
        """The digest of the first artifact (of the only one, for a server of one)."""
        return next(iter(self.served))

    @property
    def evicted(self) -> int:
        """Idle connections closed to make room."""
        return self.acceptor.evicted

    def close(self) -> None:
        for served in self.served.values():
            served.file.close()

    def note(self, kind: str, detail: str = "") -> None:
        """One line on stderr for trouble of `kind` (the first NOTES_PER_KIND of each kind)."""
        self.notes[kind] += 1
        if self.notes[kind] <= NOTES_PER_KIND:
            print(f"boot server: {kind}{': ' + detail if detail else ''}", file=sys.stderr)

    def loop_trouble(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's exception handler: what asyncio would log with a traceback, in a line."""
        exc = context.get("exception")
        self.note(context.get("message", "event loop"), f"{exc!r}" if exc else "")

    async def start(self, host: str, port: int = 0) -> Listening:
        """Listening on `host`:`port` (0: a free port; every address `host` resolves to)."""
        self.reports.mkdir(parents=True, exist_ok=True)
        return await self.acceptor.start(host, port)

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, c: Conn
    ) -> None:
        try:
            try:
                async with asyncio.timeout(READ_TIMEOUT_S):
                    status, body = await self._request(reader)
            except TimeoutError:
                status, body = 408, b"request took too long\n"
            except (OSError, asyncio.IncompleteReadError):
                raise
            except Exception as exc:  # a bug of this server: a line, never a traceback
                self.note("answering a request failed", f"{type(exc).__name__}: {exc}")
                status, body = 500, b"the boot server failed on this request\n"
            self.acceptor.busy(c)  # answering: work, not idleness
            if status == 0:
                await self._send_artifact(writer, self.served[body.decode()])
            else:
                await self._respond(writer, status, body)
                if status >= 400:
                    self.acceptor.idle(c)  # the rest may be closed for room
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
            async with asyncio.timeout(HEAD_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return 431, b"request head too large\n"
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, b"not an HTTP/1 request\n"
        method, target = parts[0], parts[1]
        headers: dict[str, list[str]] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers.setdefault(name.strip().lower(), []).append(value.strip())
        who = claim(" ".join(headers.get("authorization", [])))
        if who.error:
            return 401, f"{who.error}\n".encode()
        if who.node not in self.nodes:
            return 403, b"no such node in this round\n"
        kind, _, arg = target.lstrip("/").partition("/")
        if method != "POST":
            if not self.verifier.signed(who, method, target, b""):
                return 403, b"wrong signature (another round's credential, or another node's)\n"
            if kind == "report":
                return 405, b"POST a report\n"
            if kind != "artifact":
                return 404, b"no such path\n"
            if method != "GET":
                return 405, b"GET the artifact\n"
            if arg not in self.served:
                return 404, b"no such artifact\n"
            return 0, arg.encode()
        if kind == "artifact":
            return 405, b"GET the artifact\n"
        if kind != "report":
            return 404, b"no such path\n"
        if arg not in self.nodes:
            return 404, f"{arg!r} is not a node of this cluster\n".encode()
        if arg != who.node:
            return 403, f"{who.node}'s credential reports for {who.node} only\n".encode()
        length, refused = _content_length(headers)
        if refused:
            return length, refused
        raw = await reader.readexactly(length)
        if not self.verifier.signed(who, method, target, raw):
            return 403, b"wrong signature (another round's credential, or an altered report)\n"
        try:
            report = parse(raw, arg)
            text = report.to_json()
        except ReportError as exc:
            return 400, f"{exc}\n".encode()
        except RecursionError:  # parsed, but too deep to write out again
            return 400, b"report is nested too deep\n"
        return self._record(arg, text)

    def _record(self, node: str, text: str) -> tuple[int, bytes]:
        """Node `node`'s report `text`, taken once a round (the controller removes
        the last round's reports when a round starts)."""
        path = path_of(self.reports, node)
        try:
            held = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            held = None
        if held == text:
            return 200, b"recorded already\n"
        if held is not None:
            return 409, (
                f"{node} has reported this round already (another report: another round)\n"
            ).encode()
        # A leading dot: never a node's name (they start with a letter or digit).
        tmp = path.with_name(f".{node}.{secrets.token_hex(6)}.part")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        return 200, b"recorded\n"

    async def _send_artifact(self, writer: asyncio.StreamWriter, served: Served) -> None:
        self.statuses[200] += 1
        size = len(served.data)
        writer.write(_head(200, size, "application/gzip"))
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(SEND_TIMEOUT_S):
            if self.tls is None:  # TLS encrypts in this process: no sendfile(2) for it
                try:
                    await loop.sendfile(writer.transport, served.file, 0, size, fallback=False)
                    return
                except (asyncio.SendfileNotAvailableError, NotImplementedError):
                    pass
            view = memoryview(served.data)
            for i in range(0, len(view), CHUNK):
                writer.write(view[i : i + CHUNK])
                await writer.drain()

    async def _respond(self, writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        self.statuses[status] += 1
        extra = f"WWW-Authenticate: {AUTH_SCHEME}\r\n" if status == 401 else ""
        writer.write(_head(status, len(body), "text/plain; charset=utf-8", extra) + body)
        await writer.drain()


def _content_length(headers: dict[str, list[str]]) -> tuple[int, bytes]:
    """(length, b"") of a report's body, or (status, why) to refuse it."""
    if "transfer-encoding" in headers:
        return 411, b"send a Content-Length, not a Transfer-Encoding\n"
    values = set(headers.get("content-length", []))
    if not values:
        return 411, b"Content-Length is required\n"
    if len(values) > 1 or not CONTENT_LENGTH.fullmatch(next(iter(values))):
        return 400, b"malformed Content-Length\n"
    length = int(next(iter(values)))
    if length > MAX_REPORT_BYTES:
        return 413, f"a report is at most {MAX_REPORT_BYTES} bytes\n".encode()
    return length, b""


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After a refusal: say no more is sent, and read (and drop) what the client still sends,
    a little of it for a little while, so that closing with its body unread does not reset the
    connection before the client has read why it was refused."""
    if writer.can_write_eof():  # TLS has no half-close
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


@contextlib.contextmanager
def running(server: BootServer, host: str, port: int = 0) -> Iterator[str]:
    """`server` on its own event loop in a thread for the length of the block; yields its URL
    (`http(s)://HOST:PORT`)."""
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(server.loop_trouble)
    started = asyncio.run_coroutine_threadsafe(server.start(host, port), loop)
    thread = threading.Thread(target=loop.run_forever, name="boot-server", daemon=True)
    thread.start()
    try:
        listening = started.result(timeout=30)
        yield listening.url()
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
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(server.loop_trouble)
    listening = await server.start(host, port)
    print(f"listening on {listening.url()}", flush=True)
    stop = asyncio.Event()
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
    ap.add_argument("--key-file", type=Path, required=True, help="the round's key, hex")
    ap.add_argument("--tls-cert", type=Path, help="the server's certificate chain, PEM")
    ap.add_argument("--tls-key", type=Path, help="its private key, PEM")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        ap.error("--tls-cert and --tls-key go together")
    nodes = args.nodes.read_text(encoding="utf-8").split()
    open_files(len(nodes) + 64, MAX_CONNECTIONS + 64)
    key = key_from_text(args.key_file.read_text(encoding="utf-8"))
    tls = Tls(args.tls_cert, args.tls_key).context() if args.tls_cert else None
    server = BootServer(args.artifact, nodes, args.reports, key, tls=tls)
    try:
        asyncio.run(_serve_until_signalled(server, args.bind, args.port))
    finally:
        server.close()
    print(f"responses: {dict(sorted(server.statuses.items()))}", file=sys.stderr, flush=True)
    if server.evicted:
        print(f"idle connections closed to make room: {server.evicted}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
