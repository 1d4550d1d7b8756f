"""A persistent event loop for the adapters of asyncio-only queues, driven from sync code."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run[T](self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        self.loop.close()
