"""Hypothesis profiles for the property-based suites, and a per-database tally of what ran.

``ci`` (the default) keeps each database's run to seconds, to fit the CI budget;
``soak`` (``HYPOTHESIS_PROFILE=soak`` or ``ARCATURE_SOAK=1``, which ``make soak``
sets) runs far more examples and longer programs. The tally is printed at the end of the run, so a
CI log says how many examples and steps each database actually went through.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from django.db import connection
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "soak",
    max_examples=400,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
#: ``ARCATURE_SOAK=1`` is the switch the other long suites (chaos, faults) share.
PROFILE = (
    "soak" if os.environ.get("ARCATURE_SOAK") == "1" else os.environ.get("HYPOTHESIS_PROFILE", "ci")
)
settings.load_profile(PROFILE)

#: name of a property suite → Counter({"examples": n, "steps": n}), filled in by the suites.
TALLY: dict[str, Counter[str]] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    profile = PROFILE
    for name, counts in sorted(TALLY.items()):
        terminalreporter.write_line(
            f"hypothesis [{profile}] {name} on {connection.vendor}: "
            f"{counts['examples']} examples, {counts['steps']} steps"
        )
