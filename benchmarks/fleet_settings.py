"""Settings for the fleet benchmark's workers: the benchmark settings, without same-host hints.

The simulated hosts share one filesystem, so the Unix-socket wake-up hints that
an enqueue sends to the workers of its own host would reach workers that stand
for other machines. Real separate hosts only have LISTEN/NOTIFY (and polling).
"""

from __future__ import annotations

from benchmarks import settings as _base
from benchmarks.settings import *  # noqa: F403

ARCATURE: dict[str, object] = {**_base.ARCATURE, "WAKE_HINTS": False}  # type: ignore[no-redef]
