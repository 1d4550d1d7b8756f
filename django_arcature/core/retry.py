"""Backoff between attempts. Pure: the randomness is a parameter, so tests pin it."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

#: The longest delay a policy may ask for. Far beyond any useful backoff, and
#: far from where ``now + delay`` would overflow a datetime.
MAX_DELAY_SECONDS = 365 * 24 * 3600


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: ``base * factor ** (attempt - 1)``, capped at ``max_seconds``.

    Jitter spreads retries of jobs that failed together (a database blip fails a
    whole batch at once) so they do not all return in the same instant. It only
    ever shortens the delay, so the cap holds with jitter too.
    """

    base_seconds: float = 2.0
    factor: float = 2.0
    max_seconds: float = 600.0
    jitter: float = 0.1
    random: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        # NaN slips through every comparison below and infinity cannot become a
        # timedelta: either would only fail later, inside a worker, mid-retry.
        for name in ("base_seconds", "factor", "max_seconds", "jitter"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"RetryPolicy.{name} must be a finite number")
        if self.base_seconds < 0 or self.max_seconds < 0:
            raise ValueError("RetryPolicy delays must not be negative")
        if self.max_seconds > MAX_DELAY_SECONDS:
            raise ValueError(
                f"RetryPolicy.max_seconds must be at most {MAX_DELAY_SECONDS} (365 days)"
            )
        if self.factor < 1:
            raise ValueError("RetryPolicy.factor must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("RetryPolicy.jitter must be between 0 and 1")

    def raw_delay_seconds(self, attempt: int) -> float:
        """The delay before jitter, after ``attempt`` attempts (1-based)."""
        exponent = max(attempt, 1) - 1
        if self.base_seconds == 0:
            return 0.0
        try:
            # Float power: an int ``factor`` would build a huge exact integer first.
            delay = float(self.base_seconds) * float(self.factor) ** exponent
        except OverflowError:
            return float(self.max_seconds)
        return float(min(delay, self.max_seconds))

    def delay_for(self, attempt: int) -> timedelta:
        """How long to wait after the ``attempt``-th failed attempt."""
        delay = self.raw_delay_seconds(attempt)
        if self.jitter:
            draw = self.random()
            if not 0.0 <= draw <= 1.0:  # a misbehaving source (NaN included) cannot break the cap
                draw = 1.0 if draw > 1.0 else 0.0
            delay -= delay * self.jitter * draw
        return timedelta(seconds=max(delay, 0.0))
