"""Accepting connections under a cap, for the boot server (`serve.BootServer`): a stream server that
never holds more connections than the process's open files allow, and makes room by closing
idle ones, so that idle sockets cannot keep a node out.

asyncio's own server (`asyncio.start_server`) accepts as many connections as are waiting, up
to the listen backlog, in one go, before any of them is served: under an open-files limit below
what waits, accept(2) fails with EMFILE, asyncio logs the failure with a traceback and tries
again a second later, and a node waits until idle sockets time out (the security review,
issue 57: 120 idle connections under a 100-file limit held a report up 33 s and wrote 255 MB
of tracebacks). Here the listening sockets are watched by hand (`loop.add_reader`) and each
connection accepted on its own, only while fewer than `max_connections` are open (at most
`MAX_CONNECTIONS`, and fewer where the open-files limit says so: `connection_cap`). At the
cap the listening sockets are no longer watched (what arrives waits in the kernel's backlog),
and the connection idle longest (one its handler has not marked busy: no complete request yet,
or lingering after a refusal) is closed once it has been idle `IDLE_EVICT_S`; each closed
connection lets the next one in. A flood of F idle connections ahead of a node so delays it
about F / max_connections x IDLE_EVICT_S, not by a read timeout.

With TLS the handshake is part of the connection's time here (it counts, and is closed for
room, like any idle connection): asyncio's server would shake hands before the handler, and
the cap, saw the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import ssl
from collections.abc import Awaitable, Callable

BACKLOG = 4096
# Connections at once: at most this, and fewer where the open-files limit says so (less the
# descriptors already open and FD_RESERVE for the report files written and the loop's own).
MAX_CONNECTIONS = 8192
FD_RESERVE = 16
# At the cap, a connection idle this long is closed to make room for a new one (a node sends
# its request at once: milliseconds).
IDLE_EVICT_S = 1.0
ACCEPT_BATCH = 64  # connections taken per wake-up, so the loop serves the others too
ACCEPT_RETRY_S = 0.5  # after accept(2) failed (the system, not this process, out of something)


class Conn:
    """One accepted connection: its socket, the task serving it, and once made its transport
    (which then owns the socket)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.task: asyncio.Task | None = None
        self.transport: asyncio.BaseTransport | None = None
        self.handed = False  # to asyncio, which closes it from then on

    def close(self) -> None:
        """Now, whatever it is doing."""
        if self.transport is not None:
            self.transport.abort()
        elif self.task is not None:
            self.task.cancel()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Conn], Awaitable[None]]


class Acceptor:
    """Serves each connection with `handle(reader, writer, conn)` (which closes the writer),
    over TLS with `tls`; a connection is idle from its accept until the handler calls `busy`,
    and again after `idle`. `note(kind, detail)` says what went wrong, in a line."""

    def __init__(
        self,
        handle: Handler,
        note: Callable[[str, str], None],
        *,
        tls: ssl.SSLContext | None = None,
        limit: int = 64 * 1024,
        handshake_timeout_s: float = 10.0,
        max_connections: int = MAX_CONNECTIONS,
    ):
        self.handle, self.note, self.tls, self.limit = handle, note, tls, limit
        self.handshake_timeout_s = handshake_timeout_s
        self.max_connections = max_connections
        self.evicted = 0  # idle connections closed to make room
        # Every open connection; and those idle, since when (oldest first: dicts keep order).
        self._conns: set[Conn] = set()
        self._idle: dict[Conn, float] = {}
        self._listening: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False  # the listening sockets are watched
        self._room_timer: asyncio.TimerHandle | None = None
        self._drained: asyncio.Event | None = None

    def busy(self, c: Conn) -> None:
        self._idle.pop(c, None)

    def idle(self, c: Conn) -> None:
        self._idle.pop(c, None)
        self._idle[c] = self._loop.time()

    async def start(self, host: str, port: int = 0) -> Listening:
        """Listening on `host`:`port` (0: a free port; every address `host` resolves to)."""
        loop = self._loop = asyncio.get_running_loop()
        self._drained = asyncio.Event()
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self._listening.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and len(self._listening) > 1:  # every address on the same port
                    address = (address[0], self._listening[0].getsockname()[1], *address[2:])
                sock.bind(address)
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except BaseException:
            self._stop_listening()
            raise
        self.max_connections = min(self.max_connections, connection_cap())
        self._resume()
        return Listening(self)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            if len(self._conns) >= self.max_connections:
                self._pause()
                self._make_room()
                return
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # ENFILE, ENOBUFS, ENOMEM: wait, then try again
                self.note("accepting a connection failed", exc.strerror or str(exc))
                self._pause()
                self._loop.call_later(ACCEPT_RETRY_S, self._resume)
                return
            conn.setblocking(False)
            c = Conn(conn)
            self._conns.add(c)
            self._idle[c] = self._loop.time()
            c.task = self._loop.create_task(self._serve(c))
            c.task.add_done_callback(lambda _, c=c: self._ended(c))

    def _pause(self) -> None:
        if self._reading:
            self._reading = False
            for sock in self._listening:
                self._loop.remove_reader(sock.fileno())

    def _resume(self) -> None:
        if not self._reading and self._listening:
            self._reading = True
            for sock in self._listening:
                self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _make_room(self) -> None:
        """At the cap: close the connection idle longest, once it has been for IDLE_EVICT_S (none
        yet: look again when the oldest will have been)."""
        if self._room_timer is not None and not self._room_timer.cancelled():
            self._room_timer.cancel()
        self._room_timer = None
        if self._reading or len(self._conns) < self.max_connections or not self._idle:
            return
        c, since = next(iter(self._idle.items()))
        wait = since + IDLE_EVICT_S - self._loop.time()
        if wait > 0:
            self._room_timer = self._loop.call_later(wait, self._make_room)
            return
        del self._idle[c]
        self.evicted += 1
        c.close()

    def _ended(self, c: Conn) -> None:
        """`c`'s task is done (even one cancelled before it ran)."""
        if not c.handed:
            c.sock.close()
        self._conns.discard(c)
        self._idle.pop(c, None)
        if not self._reading and len(self._conns) < self.max_connections and self._listening:
            if self._room_timer is not None:
                self._room_timer.cancel()
                self._room_timer = None
            self._resume()
        if not self._conns and not self._listening:
            self._drained.set()

    def _stop_listening(self) -> None:
        self._pause()
        for sock in self._listening:
            sock.close()
        self._listening = []

    async def _serve(self, c: Conn) -> None:
        loop = asyncio.get_running_loop()
        try:
            reader = asyncio.StreamReader(limit=self.limit)
            protocol = asyncio.StreamReaderProtocol(reader)
            c.handed = True
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                c.sock,
                ssl=self.tls,
                ssl_handshake_timeout=self.handshake_timeout_s if self.tls else None,
            )
            c.transport = transport
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self.handle(reader, writer, c)
        except asyncio.CancelledError:
            pass  # closed to make room, or the server is stopping
        except (OSError, TimeoutError):
            pass  # a handshake that failed or took too long, a client that went away
        except Exception as exc:  # a bug of the handler: a line, never a traceback
            self.note("a connection failed", f"{type(exc).__name__}: {exc}")


class Listening:
    """A started acceptor's listening sockets; `close` then `wait_closed` stops it, closing the
    connections it still holds."""

    def __init__(self, acceptor: Acceptor):
        self.acceptor = acceptor
        self.sockets = list(acceptor._listening)

    def url(self) -> str:
        """`http(s)://HOST:PORT` of the first listening socket."""
        host, port = self.sockets[0].getsockname()[:2]
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.acceptor.tls else 'http'}://{host}:{port}"

    def close(self) -> None:
        self.acceptor._stop_listening()
        for c in list(self.acceptor._conns):
            c.close()
        if not self.acceptor._conns:
            self.acceptor._drained.set()

    async def wait_closed(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.acceptor._drained.wait()


def connection_cap(reserve: int = FD_RESERVE) -> int:
    """Connections this process can hold at once: its open-files limit less what it has open
    and `reserve` (MAX_CONNECTIONS where it has no limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 64
    return max(1, soft - used - reserve)


def open_files(need: int, want: int = 0) -> int:
    """Raise this process's open-files limit (RLIMIT_NOFILE) to at least `need`, and to `want`
    where the hard limit allows (room for connections beyond the nodes': a flood is then met
    with more of them before idle ones are closed); returns the new soft limit. A hard limit
    below `need` is refused (raising it needs root: `ulimit -Hn`, or LimitNOFILE= in a systemd
    unit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return soft
    if hard != resource.RLIM_INFINITY and hard < need:
        raise OSError(
            f"{need} open files are needed and the hard limit is {hard}: raise it"
            " (ulimit -Hn as root, or LimitNOFILE= in the service's unit)"
        )
    wanted = max(need, want if hard == resource.RLIM_INFINITY else min(want, hard))
    if soft >= wanted:
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return wanted
