"""Huey on Redis, as its documentation shows it: a ``RedisHuey``, a ``@huey.task()``
called to enqueue, and ``huey_consumer module.huey`` at its defaults (one worker
thread). The Redis server is started here on a private port, at its own defaults
but for the port and its data folder, and stopped when the contender closes.
Huey has no bulk call: bulk is the task called in a loop.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from huey import RedisHuey

from .harness import Peer, package_version
from .stamp import stamp


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


PORT = int(os.environ.setdefault("PEERS_REDIS_PORT", str(_free_port())))
huey = RedisHuey("peers", host="127.0.0.1", port=PORT)


@huey.task()
def noop(key: int) -> None:
    stamp(key)


def _cli(name: str) -> str:
    return shutil.which(name, path=str(Path(sys.executable).parent)) or name


class HueyPeer(Peer):
    name = "huey"
    label = "Huey on Redis"
    idle_unit = "Redis commands/s"
    caveats = {
        "concurrency": "1 worker thread per consumer process (huey_consumer -w 1 -k thread)",
        "finished jobs": "not kept (a None result is not stored: store_none=False)",
        "wake-up": "blocking BRPOP on Redis (1 s read timeout); no polling of a database",
        "bulk call": "none: the task called in a loop (one LPUSH each)",
        "durability": "Redis at its defaults: RDB snapshots, no AOF, no fsync per enqueue",
    }

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="peers-redis-")
        self.server: subprocess.Popen[bytes] | None = None

    def versions(self) -> dict[str, str]:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
        server = next(
            (part[2:] for part in out.stdout.split() if part.startswith("v=")), out.stdout
        )
        return {
            "huey": package_version("huey"),
            "redis (client)": package_version("redis"),
            "Redis server": server,
        }

    def setup(self) -> None:
        self.server = subprocess.Popen(
            ["redis-server", "--port", str(PORT), "--bind", "127.0.0.1", "--dir", self.folder],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if huey.storage.conn.ping():
                    break
            except Exception:
                if self.server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def clear(self) -> None:
        huey.flush()

    def enqueue_one(self, key: int) -> None:
        noop(key)

    def enqueue_batch(self, keys: list[int]) -> None:
        for key in keys:
            noop(key)

    def worker_argv(self) -> list[str]:
        return [_cli("huey_consumer"), "benchmarks.peerkit.huey_peer.huey"]

    def worker_env(self) -> dict[str, str]:
        return {"PEERS_REDIS_PORT": str(PORT)}

    def idle_counter(self) -> float | None:
        # The window's one INFO call counts too: 0.1 command/s over a 10 s window.
        return float(huey.storage.conn.info("stats")["total_commands_processed"])

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(30)
        shutil.rmtree(self.folder, ignore_errors=True)


ADAPTER = HueyPeer
