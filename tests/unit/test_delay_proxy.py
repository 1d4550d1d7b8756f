"""The benchmarks' latency proxy really delays, and never reorders or drops bytes.

The fleet benchmark's "with latency" figures are only as good as this proxy: an
echo server behind it must answer no sooner than the configured round trip, and
what comes back must be exactly what was sent, in order, however it was chunked.
"""

from __future__ import annotations

import asyncio
import time

from benchmarks.delay_proxy import DelayProxy


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _through_proxy(rtt: float, chunks: list[bytes], pause: float) -> tuple[bytes, float]:
    """Send ``chunks`` through a proxy to an echo server; return the echo and first answer time."""
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    target = echo.sockets[0].getsockname()[:2]
    proxy = DelayProxy(("127.0.0.1", 0), target, rtt)
    host, port = await proxy.start()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        expected = b"".join(chunks)
        started = time.monotonic()
        writer.write(chunks[0])
        received = await reader.readexactly(len(chunks[0]))
        first_answer = time.monotonic() - started
        for chunk in chunks[1:]:
            writer.write(chunk)
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)  # separate reads, so separate timers in the proxy
        received += await asyncio.wait_for(
            reader.readexactly(len(expected) - len(received)), timeout=10
        )
        writer.close()
        return received, first_answer
    finally:
        await proxy.close()
        echo.close()


def test_round_trip_takes_the_configured_delay_and_keeps_order() -> None:
    chunks = [f"<{i:05d}>".encode() * (1 + i % 7) for i in range(300)]
    received, first_answer = asyncio.run(_through_proxy(0.1, chunks, pause=0.0005))
    assert first_answer >= 0.1  # 50 ms each way
    assert first_answer < 0.5
    assert received == b"".join(chunks)


def test_no_delay_passes_a_large_stream_intact() -> None:
    # 4 MB in 64 kB writes: exercises the pause/resume of reading under backpressure.
    chunks = [bytes([i % 251]) * 65536 for i in range(64)]
    received, first_answer = asyncio.run(_through_proxy(0.0, chunks, pause=0))
    assert received == b"".join(chunks)
    assert first_answer < 0.1
