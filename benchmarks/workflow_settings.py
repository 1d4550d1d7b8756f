"""``benchmarks.settings`` with room for the 1 → 10,000 → 1 workflow (10,002 nodes)."""

from __future__ import annotations

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import ARCATURE

ARCATURE = {**ARCATURE, "WORKFLOW_MAX_NODES": 100_000}
