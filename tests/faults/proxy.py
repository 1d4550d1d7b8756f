"""A TCP proxy between a worker and its database server that a test can make fail on cue.

The worker connects to the proxy's port instead of the server's; the proxy passes
bytes through unchanged until the test arms a :class:`Rule`. A rule watches the
client-to-server stream for a byte pattern (a statement's text, or a parameter
value such as ``succeeded``) and then cuts that connection at a precise moment:

- ``DROP_REQUEST``: the statement that carries the pattern never reaches the server;
- ``DROP_RESPONSE``: the statement reaches the server, its answer never comes back
  (an autocommit statement has then run, and committed, on the server);
- ``DROP_BEFORE_COMMIT``: the transaction that carried the pattern is cut when its
  ``COMMIT`` is sent, before the server sees it (the server rolls it back);
- ``DROP_AFTER_COMMIT``: that ``COMMIT`` reaches the server and commits, and the
  connection is cut before the acknowledgement reaches the client — the lost-ack case.

Both PostgreSQL's wire protocol and MariaDB's carry statement text (and, as sent
by psycopg and mysqlclient, text parameters) as plain bytes, so matching bytes is
enough; TLS must be off between the worker and the proxy. Pure Python threads,
bound to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

COMMIT = b"COMMIT"


class Action(enum.Enum):
    DROP_REQUEST = "drop the request carrying the pattern"
    DROP_RESPONSE = "drop the answer to the request carrying the pattern"
    DROP_BEFORE_COMMIT = "drop the COMMIT that follows the pattern"
    DROP_AFTER_COMMIT = "drop the acknowledgement of the COMMIT that follows the pattern"


@dataclass
class Rule:
    """Cut one connection when ``pattern`` goes by, ``times`` times in all."""

    action: Action
    pattern: bytes
    times: int = 1
    fired: threading.Event = field(default_factory=threading.Event)
    count: int = 0


class _Pair:
    """One client connection and its server connection, with the state rules need."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.closed = False
        self.drop_next_response = False
        #: Rule waiting for this connection's next COMMIT.
        self.commit_rule: Rule | None = None
        self.tail = b""  # the end of the last client chunk: patterns may straddle reads

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.proxy._forget(self)

    def pump_requests(self) -> None:
        try:
            while True:
                chunk = self.client.recv(65536)
                if not chunk:
                    break
                if not self._forward_request(chunk):
                    break
        except OSError:
            pass
        finally:
            self.close()

    def _forward_request(self, chunk: bytes) -> bool:
        window = self.tail + chunk
        self.tail = chunk[-64:]
        with self.proxy.lock:
            rule = self.commit_rule
            if rule is not None and COMMIT in window:
                self.commit_rule = None
                if rule.action is Action.DROP_BEFORE_COMMIT:
                    self._fire(rule)
                    return False
                self.drop_next_response = True
                self._fire(rule)
            else:
                matched = self.proxy._match(window)
                if matched is not None:
                    if matched.action is Action.DROP_REQUEST:
                        self._fire(matched)
                        return False
                    if matched.action is Action.DROP_RESPONSE:
                        self.drop_next_response = True
                        self._fire(matched)
                    else:
                        self.commit_rule = matched
        self.server.sendall(chunk)
        return True

    def _fire(self, rule: Rule) -> None:
        logger.info("fault proxy: %s (%r)", rule.action.value, rule.pattern)
        rule.fired.set()

    def pump_responses(self) -> None:
        try:
            while True:
                chunk = self.server.recv(65536)
                if not chunk:
                    break
                with self.proxy.lock:
                    drop = self.drop_next_response
                if drop:
                    break
                self.client.sendall(chunk)
        except OSError:
            pass
        finally:
            self.close()


class FaultProxy:
    """Listen on 127.0.0.1 (a free port) and relay every connection to ``upstream``."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.lock = threading.Lock()
        self.rules: list[Rule] = []
        self.pairs: set[_Pair] = set()
        self.connections_seen = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._closing = False
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    def arm(self, action: Action, pattern: bytes, times: int = 1) -> Rule:
        """Cut the next ``times`` connections that send ``pattern``, as ``action`` says."""
        rule = Rule(action, pattern, times)
        with self.lock:
            self.rules.append(rule)
        return rule

    def drop_all(self) -> int:
        """Cut every open connection now (as a network failure would); how many were cut."""
        with self.lock:
            pairs = list(self.pairs)
        for pair in pairs:
            pair.close()
        return len(pairs)

    def close(self) -> None:
        self._closing = True
        self.listener.close()
        self.drop_all()
        self._thread.join(2)

    def _match(self, window: bytes) -> Rule | None:
        """The first live rule whose pattern is in ``window`` (called with the lock held)."""
        for rule in self.rules:
            if rule.count < rule.times and rule.pattern in window:
                rule.count += 1
                return rule
        return None

    def _forget(self, pair: _Pair) -> None:
        with self.lock:
            self.pairs.discard(pair)

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(self, client, server)
            with self.lock:
                self.pairs.add(pair)
                self.connections_seen += 1
            for target in (pair.pump_requests, pair.pump_responses):
                threading.Thread(target=target, name="fault-proxy-pump", daemon=True).start()


@contextlib.contextmanager
def proxy_to_test_database() -> Iterator[FaultProxy]:
    """A proxy in front of the test database's server, closed afterwards."""
    from django.db import connection

    settings = connection.settings_dict
    relay = FaultProxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"]))
    try:
        yield relay
    finally:
        relay.close()
