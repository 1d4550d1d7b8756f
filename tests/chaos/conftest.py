"""The chaos suites' worker fleet: the fault suite's ``fleet`` fixture."""

from __future__ import annotations

from tests.faults.processes import fleet

__all__ = ["fleet"]
