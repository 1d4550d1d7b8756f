"""Job handlers that hand the worker's write path data a database may refuse.

Their arguments are plain (enqueue-time validation refuses NUL and lone
surrogates in payloads); the hostile values are made inside the handler, where
nothing but the worker's write path stands between them and the database.
"""

from __future__ import annotations

import threading
from typing import Any

from django_arcature import Permanent, RetryPolicy, job
from django_arcature.context import current_job

#: Values (and error texts) by name; ``nan`` and ``inf`` are refused by every database's
#: JSON column, the texts only by PostgreSQL (NUL, lone surrogates) unless cleaned first.
HOSTILE: dict[str, Any] = {
    "nul": "before\x00after",
    "surrogate": "lone \ud800 surrogate",
    "nul_key": {"key\x00": 1},
    "surrogate_deep": {"a": [{"b": "x\udfffy"}]},
    "nan": float("nan"),
    "inf": {"big": float("inf")},
    "nested_nan": [1, [2, float("-inf")]],
}


@job(name="faults.return_hostile", max_attempts=1)
def return_hostile(kind: str) -> Any:
    return HOSTILE[kind]


@job(name="faults.raise_hostile", max_attempts=2, retry=RetryPolicy(base_seconds=0, jitter=0))
def raise_hostile(kind: str, permanent: bool = False) -> None:
    text = f"handler failed with {HOSTILE[kind]!s}" if isinstance(HOSTILE[kind], str) else "x"
    if permanent:
        raise Permanent(text)
    raise RuntimeError(text)


@job(name="faults.ok")
def ok(n: int) -> int:
    return n


# --- A handler the test releases attempt by attempt (in-process workers only) ---------

#: attempt number → the event that lets that attempt return; attempts past the
#: last gate wait on the last one.
GATES: dict[int, threading.Event] = {}
STARTED: dict[int, threading.Event] = {}


def reset_gates(count: int) -> None:
    GATES.clear()
    STARTED.clear()
    for attempt in range(1, count + 1):
        GATES[attempt] = threading.Event()
        STARTED[attempt] = threading.Event()


@job(name="faults.gated", max_attempts=5)
def gated() -> str:
    context = current_job()
    assert context is not None
    attempt = min(context.attempt, max(GATES))
    STARTED[attempt].set()
    GATES[attempt].wait(60)
    return f"attempt {context.attempt}"
