"""A TCP proxy that adds a fixed delay to each direction, for simulating network latency.

    python benchmarks/delay_proxy.py --listen 10.77.1.1:6543 --target 127.0.0.1:5432 --rtt-ms 2

Why a userspace proxy: the kernel of the benchmark machine has no ``sch_netem``, so
``tc qdisc … netem delay`` is not available. Every chunk read from one side is
written to the other ``rtt/2`` later (each direction gets half the round trip),
in the order it was read. The proxy runs with delay 0 as well, so that runs "with"
and "without" latency pay the same proxying cost and differ only by the delay.

Ordering: each direction keeps a FIFO of ``(due, bytes)`` and one timer for its head;
chunks are never scheduled independently (asyncio's timer heap does not keep the
order of timers due at the same instant). Backpressure: when a destination's write
buffer fills, reading from its source pauses until it drains.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import signal

logger = logging.getLogger(__name__)


class _Pipe:
    """One direction: bytes read from a source, written to ``sink`` ``delay`` seconds later."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        self.sink: asyncio.Transport | None = None
        self.pending: collections.deque[tuple[float, bytes]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None
        self.eof = False  # the source is gone: close the sink once the data is out

    def push(self, data: bytes) -> None:
        if self.delay <= 0 and not self.pending and self.sink is not None:
            self.sink.write(data)
            return
        self.pending.append((self.loop.time() + self.delay, data))
        self._schedule()

    def finish(self) -> None:
        self.eof = True
        self._schedule()

    def _schedule(self) -> None:
        if self.timer is not None or self.sink is None:
            return
        if self.pending:
            self.timer = self.loop.call_at(self.pending[0][0], self._release)
        elif self.eof:
            self._close_sink()

    def _release(self) -> None:
        self.timer = None
        sink = self.sink
        if sink is None or sink.is_closing():
            self.pending.clear()
            return
        now = self.loop.time()
        while self.pending and self.pending[0][0] <= now:
            sink.write(self.pending.popleft()[1])
        self._schedule()

    def attach(self, sink: asyncio.Transport) -> None:
        self.sink = sink
        self._schedule()

    def _close_sink(self) -> None:
        # close() still sends what the transport has buffered. No half-close: the
        # protocols proxied here (PostgreSQL's) never use it.
        if self.sink is not None and not self.sink.is_closing():
            self.sink.close()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.pending.clear()


class _Side(asyncio.Protocol):
    """One socket of a proxied connection; what it reads goes into ``outgoing``."""

    def __init__(self, conn: _Connection, outgoing: _Pipe, incoming: _Pipe) -> None:
        self.conn = conn
        self.outgoing = outgoing
        self.incoming = incoming
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.incoming.attach(transport)

    def data_received(self, data: bytes) -> None:
        self.outgoing.push(data)

    def eof_received(self) -> bool:
        self.outgoing.finish()
        return False  # close this socket; the peer's is closed once its data is out

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.lost(self)

    # The sink (this side's transport) is full: stop reading from the other side.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Connection:
    """A client connection and its upstream connection, with one pipe per direction."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.up = _Pipe(loop, delay)  # client → target
        self.down = _Pipe(loop, delay)  # target → client
        self.client = _Side(self, outgoing=self.up, incoming=self.down)
        self.upstream = _Side(self, outgoing=self.down, incoming=self.up)
        self.client.peer, self.upstream.peer = self.upstream, self.client

    def lost(self, side: _Side) -> None:
        """Either socket closed: close the other once what was read from this one is out."""
        side.outgoing.finish()
        side.incoming.cancel()  # nobody left to deliver it to


class DelayProxy:
    """Listens on ``listen`` and forwards each connection to ``target`` with ``rtt/2`` each way."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], rtt: float) -> None:
        self.listen = listen
        self.target = target
        self.delay = rtt / 2
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        """Start listening; returns the bound address (port 0 picks a free one)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: self._accept(loop), self.listen[0], self.listen[1], reuse_address=True
        )
        host, port = self.server.sockets[0].getsockname()[:2]
        return host, port

    def _accept(self, loop: asyncio.AbstractEventLoop) -> asyncio.Protocol:
        conn = _Connection(loop, self.delay)
        loop.create_task(self._connect_upstream(loop, conn))
        return conn.client

    async def _connect_upstream(self, loop: asyncio.AbstractEventLoop, conn: _Connection) -> None:
        try:
            await loop.create_connection(lambda: conn.upstream, *self.target)
        except OSError as exc:
            logger.warning("cannot reach %s:%d: %s", *self.target, exc)
            if conn.client.transport is not None:
                conn.client.transport.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def serve(listen: list[tuple[str, int]], target: tuple[str, int], rtt: float) -> None:
    proxies = [DelayProxy(addr, target, rtt) for addr in listen]
    for proxy in proxies:
        host, port = await proxy.start()
        print(f"listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for proxy in proxies:
        with contextlib.suppress(Exception):
            await proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--listen", action="append", type=address, required=True, help="host:port (repeatable)"
    )
    parser.add_argument("--target", type=address, required=True, help="host:port to forward to")
    parser.add_argument(
        "--rtt-ms", type=float, default=0.0, help="added round trip; each direction gets half"
    )
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(serve(options.listen, options.target, options.rtt_ms / 1000))


if __name__ == "__main__":
    main()
