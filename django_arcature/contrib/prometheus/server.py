"""The worker's metrics endpoint (``arcature_worker --metrics-port PORT``).

Without multiprocess mode each worker serves only its own counters, so two
workers on one host need two ports: a port already in use is a configuration
error and the worker refuses to start. In multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR`` set) every worker on the host writes its counters
to that directory and any of them can serve the sum, so all of them are given
the same port: the first to bind it serves, the others keep trying every
``retry_seconds`` and one takes over if the server's process exits.
"""

from __future__ import annotations

import errno
import logging
import threading
from typing import Any

from prometheus_client import start_http_server

from .receivers import install
from .registry import multiprocess_enabled, serving_registry

logger = logging.getLogger(__name__)

RETRY_SECONDS = 10.0
#: The address served unless told otherwise: this host only. Metrics name queues and
#: tasks and count a site's traffic; publishing them to the network is a choice
#: (``--metrics-addr 0.0.0.0``), not a default.
DEFAULT_ADDR = "127.0.0.1"


class MetricsPortInUse(RuntimeError):
    """The port is taken and this process has no way to share it."""


class MetricsServer:
    """Serves ``/metrics`` on ``addr:port`` (``addr`` empty: 127.0.0.1) from a daemon thread."""

    def __init__(
        self,
        port: int,
        addr: str = DEFAULT_ADDR,
        *,
        using: str = "default",
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.port = port
        self.addr = addr
        self.using = using
        self.retry_seconds = retry_seconds
        self.serving = False
        self._server: Any = None
        self._stop = threading.Event()
        self._retry: threading.Thread | None = None

    def start(self) -> None:
        """Count from now on and serve, or wait for the port (multiprocess mode)."""
        install()
        if self._try_bind():
            return
        if not multiprocess_enabled():
            raise MetricsPortInUse(
                f"metrics port {self.port} is already in use. Give each worker on this host "
                "its own --metrics-port, or set PROMETHEUS_MULTIPROC_DIR so they share one "
                "(see the “Observability” page of the django-arcature documentation)."
            )
        logger.info(
            "metrics port %d is served by another process on this host (multiprocess mode: "
            "it reports this worker's counters too); retrying every %gs",
            self.port,
            self.retry_seconds,
        )
        self._retry = threading.Thread(
            target=self._keep_trying, name="arcature-metrics-bind", daemon=True
        )
        self._retry.start()

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.serving = False

    def _try_bind(self) -> bool:
        try:
            server, _thread = start_http_server(
                self.port, addr=self.addr or DEFAULT_ADDR, registry=serving_registry(self.using)
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            return False
        self._server = server
        self.serving = True
        logger.info("serving metrics on %s:%d/metrics", self.addr or DEFAULT_ADDR, self.port)
        return True

    def _keep_trying(self) -> None:
        while not self._stop.wait(self.retry_seconds):
            if self._try_bind():
                return
