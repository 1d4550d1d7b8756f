"""Oban for Python (PyPI ``oban``), as its README shows it: a ``@worker`` class,
``Worker.enqueue`` through a client-mode ``Oban(pool=...)``, ``oban.enqueue_many``
for bulk, and ``oban start --queues default:10`` for the worker (the README's
queue limit; ``oban start`` has no default one).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from oban import Oban, worker

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


@worker(queue="default")
class Noop:
    async def process(self, job: Any) -> None:
        stamp(job.args["key"])


#: The decorated class, whose ``new`` and ``enqueue`` the decorator adds.
NOOP: Any = Noop


def _cli() -> str:
    return shutil.which("oban", path=str(Path(sys.executable).parent)) or "oban"


class ObanPeer(Peer):
    name = "oban"
    label = "Oban for Python"
    caveats = {
        "concurrency": "asyncio; queue limit 10 per process (the README's default:10)",
        "finished jobs": "kept (completed rows, pruned after 1 day by default)",
        "wake-up": "LISTEN/NOTIFY from an insert trigger; stager polls every 1 s",
        "bulk call": "Oban.enqueue_many (one INSERT)",
    }

    def __init__(self) -> None:
        self.db = database_name(self.name)
        self.dsn = pg_dsn(self.db)
        self.aio = Loop()

    def versions(self) -> dict[str, str]:
        return {
            "oban": package_version("oban"),
            "psycopg": package_version("psycopg"),
            "PostgreSQL": pg_server_version(),
        }

    def setup(self) -> None:
        ensure_pg_database(self.db)
        subprocess.run([_cli(), "install", "--dsn", self.dsn], check=True, capture_output=True)
        self.pool = self.aio.run(Oban.create_pool(self.dsn))
        self.oban = Oban(pool=self.pool)  # client mode: no queues, enqueue only

    def clear(self) -> None:
        async def truncate() -> None:
            async with self.pool.connection() as conn:
                await conn.execute("TRUNCATE oban_jobs")

        self.aio.run(truncate())

    def enqueue_one(self, key: int) -> None:
        self.aio.run(NOOP.enqueue({"key": key}))

    def enqueue_batch(self, keys: list[int]) -> None:
        self.aio.run(self.oban.enqueue_many([NOOP.new({"key": key}) for key in keys]))

    def worker_argv(self) -> list[str]:
        return [_cli(), "start", "--dsn", self.dsn, "--queues", "default:10"]

    def idle_counter(self) -> float | None:
        return float(pg_transactions(self.db))

    def close(self) -> None:
        if hasattr(self, "pool"):
            self.aio.run(self.pool.close())
        self.aio.close()


ADAPTER = ObanPeer
