"""``--metrics-port`` listens on this host only unless told otherwise.

Metrics name queues and tasks and count a site's traffic: a default that serves
them on every interface publishes them to the network. The checks connect the
way a neighbour would: 127.0.0.2 is another loopback address, which a listener on
every interface accepts and one on 127.0.0.1 refuses.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tests.concurrency.conftest import wait_until
from tests.observability.test_prometheus import free_port, scrape

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _stop(worker: Any) -> None:
    """SIGTERM once the worker has started: its metrics port answers before its loop has
    installed the SIGTERM handler, and a signal in between ends it with -SIGTERM."""
    wait_until(lambda: " started: " in worker.log, what="the worker's loop to start")
    worker.signal(15)
    assert worker.wait(30) == 0, worker.log


def _listening_addresses(port: int) -> set[str]:
    """The local IPv4 addresses with a socket listening on ``port`` (from /proc/net/tcp)."""
    found = set()
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            local, state = line.split()[1], line.split()[3]
            address, local_port = local.split(":")
            if state == "0A" and int(local_port, 16) == port:  # 0A: LISTEN
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_the_default_listener_is_on_127_0_0_1_only(start_worker: Any) -> None:
    port = free_port()
    worker = start_worker("--metrics-port", str(port))
    scrape(port)  # serving on 127.0.0.1
    assert _listening_addresses(port) == {"127.0.0.1"}
    assert not _accepts("127.0.0.2", port), "the metrics port answers beyond 127.0.0.1"
    assert "serving metrics on 127.0.0.1:" in worker.log
    _stop(worker)


def test_metrics_addr_widens_it_when_asked(start_worker: Any) -> None:
    port = free_port()
    worker = start_worker("--metrics-port", str(port), "--metrics-addr", "0.0.0.0")
    scrape(port)
    assert _listening_addresses(port) == {"0.0.0.0"}
    wait_until(lambda: _accepts("127.0.0.2", port), what="a listener on every interface")
    _stop(worker)
