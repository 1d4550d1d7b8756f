"""Argument types for command options that override an ``ARCATURE`` key.

An option replaces its key for one process, so it is held to the key's range
(``conf``): otherwise a worker would run with a value the settings refuse, or
stop later in a traceback from the code that does check.

Their messages are for the person who typed the option, so they are translated
(argparse prefixes them with its own English "argument --x: invalid ... value").
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from django.conf import settings
from django.utils.translation import gettext

from django_arcature.core.limits import QUEUE_MAX_LENGTH, name_problem


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                gettext("must be from %(low)s to %(high)s, not %(value)s")
                % {"low": low, "high": high, "value": value}
            )
        return value

    parse.__name__ = "whole number"  # argparse names the type in "invalid ... value"
    return parse


def seconds(low: float, high: float, *, above_low: bool = False) -> Callable[[str], float]:
    """A number of seconds from ``low`` (or above it) to ``high``."""

    def parse(text: str) -> float:
        value = float(text)
        if above_low and not low < value <= high:
            raise argparse.ArgumentTypeError(
                gettext("must be above %(low)s, up to %(high)s, not %(value)s")
                % {"low": f"{low:g}", "high": f"{high:g}", "value": text}
            )
        if not above_low and not low <= value <= high:
            raise argparse.ArgumentTypeError(
                gettext("must be from %(low)s to %(high)s, not %(value)s")
                % {"low": f"{low:g}", "high": f"{high:g}", "value": text}
            )
        return value

    parse.__name__ = "number of seconds"
    return parse


def minutes(text: str) -> float:
    """A number of minutes above 0 (a window that ends now)."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(
            gettext("must be a number of minutes above 0, not %(value)s") % {"value": text}
        )
    return value


def queue_name(text: str) -> str:
    """A queue name as ``ARCATURE["DEFAULT_QUEUE"]`` and ``@job(queue=...)`` take it."""
    problem = name_problem(text, "queue", QUEUE_MAX_LENGTH)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def database_alias(text: str) -> str:
    """An entry of ``DATABASES``: an unknown alias otherwise ends in a traceback."""
    if text not in settings.DATABASES:
        known = ", ".join(sorted(settings.DATABASES))
        raise argparse.ArgumentTypeError(
            gettext("%(alias)r is not an entry of DATABASES (%(known)s)")
            % {"alias": text, "known": known}
        )
    return text
