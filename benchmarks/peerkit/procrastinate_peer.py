"""procrastinate, as its quickstart shows it: an ``App`` on a ``PsycopgConnector``, a
plain ``def`` task, ``task.defer_async`` (``batch_defer_async`` for bulk) and
``procrastinate --app=... worker`` at its defaults (concurrency 1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from procrastinate import App, PsycopgConnector

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

DSN = pg_dsn(os.environ.get("PEERS_PROCRASTINATE_DB") or database_name("procrastinate"))
app = App(connector=PsycopgConnector(conninfo=DSN))
APP_PATH = "benchmarks.peerkit.procrastinate_peer.app"


@app.task(queue="default")
def noop(key: int) -> None:
    stamp(key)


def _cli() -> str:
    return shutil.which("procrastinate", path=str(Path(sys.executable).parent)) or "procrastinate"


class ProcrastinatePeer(Peer):
    name = "procrastinate"
    label = "procrastinate"
    caveats = {
        "concurrency": "1 job at a time per worker process (default concurrency 1)",
        "finished jobs": "kept (succeeded rows; delete_jobs defaults to never)",
        "wake-up": "LISTEN/NOTIFY; 5 s polling fallback",
        "bulk call": "task.batch_defer_async (one INSERT)",
    }

    def __init__(self) -> None:
        self.db = database_name(self.name)
        self.aio = Loop()

    def versions(self) -> dict[str, str]:
        return {
            "procrastinate": package_version("procrastinate"),
            "psycopg": package_version("psycopg"),
            "PostgreSQL": pg_server_version(),
        }

    def setup(self) -> None:
        ensure_pg_database(self.db)
        import psycopg

        with psycopg.connect(DSN, autocommit=True) as conn:
            row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        if row is None or row[0] is None:
            subprocess.run(
                [_cli(), f"--app={APP_PATH}", "schema", "--apply"], check=True, capture_output=True
            )
        self.aio.run(app.open_async())

    def clear(self) -> None:
        import psycopg

        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute("TRUNCATE procrastinate_jobs CASCADE")

    def enqueue_one(self, key: int) -> None:
        self.aio.run(noop.defer_async(key=key))

    def enqueue_batch(self, keys: list[int]) -> None:
        self.aio.run(noop.batch_defer_async(*({"key": key} for key in keys)))

    def worker_argv(self) -> list[str]:
        return [_cli(), f"--app={APP_PATH}", "worker"]

    def worker_env(self) -> dict[str, str]:
        return {"PEERS_PROCRASTINATE_DB": self.db}

    def idle_counter(self) -> float | None:
        return float(pg_transactions(self.db))

    def close(self) -> None:
        self.aio.run(app.close_async())
        self.aio.close()


ADAPTER = ProcrastinatePeer
