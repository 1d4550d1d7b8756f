"""pgqueuer, as its README shows it: an asyncpg connection, ``Queries.enqueue``, and
``pgq run module:factory`` for the worker (a factory that returns a ``PgQueuer``).

Bulk is the same call with lists (one INSERT ... SELECT FROM unnest). The worker
runs at ``pgq run``'s defaults (batch size 10, no concurrency limit); the handler is
an ``async def`` as in the README.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from ._aio import Loop
from .harness import (
    Peer,
    database_name,
    ensure_pg_database,
    package_version,
    pg_dsn,
    pg_server_version,
    pg_transactions,
)
from .stamp import stamp

ENTRYPOINT = "noop"


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    """The worker's factory, for ``pgq run benchmarks.peerkit.pgqueuer_peer:main``.

    pgq 1.6 wants an async context manager (its error message says so); the
    README's plain ``async def`` returning the ``PgQueuer`` is the older form."""
    connection = await asyncpg.connect(os.environ["PEERS_DSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        stamp((job.payload or b"").decode())

    try:
        yield pgq
    finally:
        await connection.close()


class PgQueuerPeer(Peer):
    name = "pgqueuer"
    label = "pgqueuer"
    caveats = {
        "concurrency": "async; batch size 10 per fetch, no concurrency limit (pgq run defaults)",
        "finished jobs": "deleted from the queue table, one row logged in pgqueuer_log",
        "wake-up": "LISTEN/NOTIFY (dequeue timeout 30 s as fallback)",
        "bulk call": "Queries.enqueue with lists (INSERT ... FROM unnest)",
        "installed with": "typer<0.29: pgqueuer 1.6.0's pgq run fails with typer 0.29 "
        "(its --log-level default reaches logging as a str: AttributeError)",
    }

    def __init__(self) -> None:
        self.db = database_name(self.name)
        self.dsn = pg_dsn(self.db)
        self.aio = Loop()

    def versions(self) -> dict[str, str]:
        return {
            "pgqueuer": package_version("pgqueuer"),
            "asyncpg": package_version("asyncpg"),
            "PostgreSQL": pg_server_version(),
        }

    def setup(self) -> None:
        ensure_pg_database(self.db)
        self.connection = self.aio.run(asyncpg.connect(self.dsn))
        installed = self.aio.run(self.connection.fetchval("SELECT to_regclass('pgqueuer')"))
        if installed is None:
            pgq = shutil.which("pgq", path=str(Path(sys.executable).parent)) or "pgq"
            subprocess.run([pgq, "install"], env={**os.environ, **self.libpq_env()}, check=True)
        self.queries = Queries(AsyncpgDriver(self.connection))

    def libpq_env(self) -> dict[str, str]:
        from urllib.parse import urlsplit

        parts = urlsplit(self.dsn)
        return {
            "PGHOST": parts.hostname or "",
            "PGPORT": str(parts.port or 5432),
            "PGUSER": parts.username or "",
            "PGPASSWORD": parts.password or "",
            "PGDATABASE": self.db,
        }

    def clear(self) -> None:
        self.aio.run(self.connection.execute("TRUNCATE pgqueuer, pgqueuer_log"))

    def enqueue_one(self, key: int) -> None:
        self.aio.run(self.queries.enqueue(ENTRYPOINT, str(key).encode()))

    def enqueue_batch(self, keys: list[int]) -> None:
        self.aio.run(
            self.queries.enqueue(
                [ENTRYPOINT] * len(keys), [str(key).encode() for key in keys], [0] * len(keys)
            )
        )

    def worker_argv(self) -> list[str]:
        pgq = shutil.which("pgq", path=str(Path(sys.executable).parent)) or "pgq"
        return [pgq, "run", "benchmarks.peerkit.pgqueuer_peer:main"]

    def worker_env(self) -> dict[str, str]:
        return {"PEERS_DSN": self.dsn, **self.libpq_env()}

    def idle_counter(self) -> float | None:
        return float(pg_transactions(self.db))

    def close(self) -> None:
        if hasattr(self, "connection"):
            self.aio.run(self.connection.close())
        self.aio.close()


ADAPTER = PgQueuerPeer
